"""Channels: one operator instance's output to one downstream instance, as bundles appended to a log and tailed.

Bottom to top: ``payload`` (what a message carries) and ``barrier`` (a barrier's payload); ``base`` (the
interface of a channel log: ``ChannelStore``, ``ChannelAppender``, ``ChannelTail``); the two kinds, ``file`` and
``kafka``; ``writer`` (ring buffer and transfer thread per output channel) and ``reader`` (one task's input
channels merged); ``factory`` (``open_channel_store``: the kind a URI names).
"""
