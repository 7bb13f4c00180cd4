"""eventlog: capture/replay event logs in timely dataflow's Progress/Messages model.

The model (times, antichains, events, stream headers), the Arrow and Avro encodings and ``open_log``.

Every public name is imported from its module on first use (``eventlog._lazy``): ``import eventlog`` alone
imports no pyarrow.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_package

if TYPE_CHECKING:
    from .antichain import Antichain, MutableAntichain
    from .change_batch import ChangeBatch
    from .errors import (
        ClusterUnavailableError,
        ConditionalWritesError,
        CorruptLogError,
        DeliveryError,
        EventLogError,
        HeaderMismatchError,
        InterleavedWritersError,
        InvalidTimeError,
        InvalidURIError,
        LimitError,
        LogLimitError,
        LostDataError,
        MissingExtraError,
        PartLockedError,
        ProgressError,
        SchemaMismatchError,
        SequenceError,
        StorageUnavailableError,
        StreamNotFoundError,
        UnsupportedVersionError,
        WriterFencedError,
    )
    from .events import Entry, Event, Messages, Progress
    from .header import FORMAT_VERSION, StreamHeader
    from .log import Log, PartReader, PartStats, PartWriter, open_log
    from .time import INT64, Time, TimeType

__version__ = "0.1.0"

_MODULES = {
    ".antichain": ["Antichain", "MutableAntichain"],
    ".change_batch": ["ChangeBatch"],
    ".errors": [
        "ClusterUnavailableError", "ConditionalWritesError", "CorruptLogError", "DeliveryError", "EventLogError",
        "HeaderMismatchError", "InterleavedWritersError", "InvalidTimeError", "InvalidURIError", "LimitError",
        "LogLimitError", "LostDataError", "MissingExtraError", "PartLockedError", "ProgressError",
        "SchemaMismatchError", "SequenceError", "StorageUnavailableError", "StreamNotFoundError",
        "UnsupportedVersionError", "WriterFencedError",
    ],
    ".events": ["Entry", "Event", "Messages", "Progress"],
    ".header": ["FORMAT_VERSION", "StreamHeader"],
    ".log": ["Log", "PartReader", "PartStats", "PartWriter", "open_log"],
    ".time": ["INT64", "Time", "TimeType"],
}
lazy_package(__name__, {name: module for module, names in _MODULES.items() for name in names})

__all__ = [
    "Antichain", "ChangeBatch", "ClusterUnavailableError", "ConditionalWritesError", "StorageUnavailableError", "CorruptLogError", "DeliveryError", "Entry", "Event", "EventLogError", "FORMAT_VERSION",
    "HeaderMismatchError", "INT64", "InterleavedWritersError", "InvalidTimeError", "InvalidURIError", "LimitError", "Log", "LogLimitError",
    "LostDataError", "Messages", "MissingExtraError",
    "MutableAntichain", "PartLockedError", "PartReader", "PartStats", "PartWriter", "Progress", "ProgressError",
    "SchemaMismatchError", "SequenceError", "StreamHeader", "StreamNotFoundError", "Time", "TimeType",
    "UnsupportedVersionError", "WriterFencedError", "open_log",
]
