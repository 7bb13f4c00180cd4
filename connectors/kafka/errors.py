"""The typed errors of writers and lost data, defined in ``eventlog.errors`` (every log uses them) and named
here too for code that imports them from the Kafka connector."""

from eventlog.errors import InterleavedWritersError, LostDataError, WriterFencedError

__all__ = ["InterleavedWritersError", "LostDataError", "WriterFencedError"]
