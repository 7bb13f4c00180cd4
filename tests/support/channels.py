"""The runtime's channels wired up for tests: writers and one reader over a channel store."""

from __future__ import annotations

from runtime import WriterSettings
from runtime.channels.reader import ChannelReader
from runtime.channels.writer import ChannelWriter, Transfer


def channel_pair(store, names, settings=None, start_ids=None):
    """Prepare channels ``names`` (generation 1) in ``store``: a started ``Transfer``, a ``ChannelWriter`` per
    channel (its ids from ``start_ids``, default 0) and one ``ChannelReader`` of them all. Returns
    ``(transfer, writers, reader)``."""
    store.prepare(1, names)
    transfer = Transfer(settings or WriterSettings(bundle_messages=3))
    writers = [ChannelWriter(n, store.appender(1, i, n), transfer, start_id=(start_ids or {}).get(n, 0))
               for i, n in enumerate(names)]
    transfer.start()
    reader = ChannelReader(store.tail(1, list(enumerate(names))),
                           [(i, n, (start_ids or {}).get(n, 0)) for i, n in enumerate(names)])
    return transfer, writers, reader
