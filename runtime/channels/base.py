"""Where channel bundles live: the interface every kind of channel log implements.

A *channel* carries one operator instance's output to one downstream instance. The runtime frames it as
bundles (``eventlog.bundle``) and appends them to the channel's log; the downstream reader tails that log.
Each run of the job graph after a (re)start is a *generation* with its own channel logs: a restarted job
never reads a failed generation's channel data (every reader restarts right after the message id saved
in the checkpoint, and its writer produces those messages again), so a zombie task of an old generation
cannot interleave bundles with the new one. Two kinds (``runtime.channels.factory.open_channel_store`` opens
the one a URI names):

* files (``file:///path`` or a path): ``<path>/<job>/g<generation>/<channel>/<segment>.bundles``,
  concatenated bundles, a new segment after every BARRIER bundle (``runtime.channels.file``);
* Kafka (``kafka://host:port/prefix``): a topic ``<prefix>.<job>.g<generation>`` per generation, a partition
  per channel, one bundle per record (``runtime.channels.kafka``).
"""

from __future__ import annotations

import abc
from typing import Any, Sequence

from eventlog import bundle


class ChannelAppender(abc.ABC):
    """Appends one channel's bundles (a writer's transfer thread owns it)."""

    @abc.abstractmethod
    def append(self, data: Any, *, barrier: bool = False) -> None:
        """Append one encoded bundle (a bytes-like object); ``barrier`` marks a BARRIER bundle."""

    def check(self) -> None:
        """Raise ``ChannelError`` if the storage failed to take an appended bundle (called while the writer is
        idle too, so a failure is noticed even when nothing more is appended)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Hand everything appended to the storage and release it."""


class ChannelTail(abc.ABC):
    """Reads the input channels of one task (positions index the job's channel list)."""

    @abc.abstractmethod
    def poll(self, wanted: Sequence[int]) -> list[tuple[int, bundle.Bundle]]:
        """New bundles, ``(channel position, bundle)`` in each channel's order, of the ``wanted`` channels
        (never blocks)."""

    @abc.abstractmethod
    def trim(self, position: int, checkpoint: int) -> None:
        """Delete what channel ``position`` holds up to and including the barrier of ``checkpoint``, which
        the reader has consumed (called once that checkpoint is complete)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release files or consumers."""


class ChannelStore(abc.ABC):
    """The channel logs of one job (every generation)."""

    uri: str
    job: str
    max_bundle_bytes: int | None = None
    """The largest bundle the storage takes (None: no limit); writers cut bundles below it."""
    min_idle_interval: float = 0.0
    """The shortest interval between an idle channel's EMPTY bundles the storage wants (writers use the larger
    of it and ``WriterSettings.idle_interval``); a frontier that moved is sent at once regardless."""

    @abc.abstractmethod
    def prepare(self, generation: int, channels: Sequence[str]) -> None:
        """Create what a generation's channels need (the driver calls it before any task starts)."""

    def mark(self, generation: int, token: str) -> None:
        """Leave the run mark of ``generation`` where its tasks check it (the driver, after ``prepare``; a
        store every task reaches over the network, like Kafka, has nothing to mark)."""

    def check_mark(self, generation: int, token: str, *, task: str) -> None:
        """Raise ``UnreachableLocationError`` when this task does not see the generation's channels as the
        driver prepared them (``runtime.checkpoints.marks``)."""

    @abc.abstractmethod
    def appender(self, generation: int, position: int, channel: str) -> ChannelAppender:
        """The appender of one channel (position = its index in the generation's channel list)."""

    @abc.abstractmethod
    def tail(self, generation: int, channels: Sequence[tuple[int, str]]) -> ChannelTail:
        """A reader of channels ``(position, name)``."""

    @abc.abstractmethod
    def drop_generations(self, below: int) -> None:
        """Delete the channel data of every generation before ``below``."""

    def close(self) -> None:
        """Release clients."""

