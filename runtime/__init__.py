"""The Spark-hosted streaming runtime: operators exchanging bundles over log channels, with exactly-once
checkpoints, failover and rescale (Ray Streaming's design, hosted on Spark). See ``docs/runtime.md``.

    from runtime import Job
    job = Job("wordcount")
    lines = job.from_generator(read_lines, parts=4, parallelism=2)
    words = lines.flat_map(lambda r: [{"word": w} for w in r["line"].split()])
    words.key_by("word").window(10).count().to_log("file:///tmp/out", "counts", schema=schema)
    job.run(spark, channels="file:///tmp/ch", checkpoints="file:///tmp/ck", checkpoint_interval=1.0)
"""

from .errors import (
    ChannelError,
    CheckpointCorruptError,
    CheckpointError,
    FinishedOutputError,
    InjectedFailure,
    JobAbortedError,
    JobFailedError,
    JobGraphError,
    LocationError,
    NotEnoughSlotsError,
    RescaleError,
    RuntimeJobError,
    StoreUnavailableError,
    TaskFailedError,
    UnreachableLocationError,
    UnstorableStateError,
)
from .failover import JobResult, RestartBackoff
from .faults import Fault, FaultPlan
from .graph import Job, KeyedStream, Stream
from .keygroups import DEFAULT_KEY_GROUPS
from .sources import Advance
from .writer import WriterSettings

__all__ = [
    "Advance", "ChannelError", "CheckpointCorruptError", "CheckpointError", "DEFAULT_KEY_GROUPS", "Fault",
    "FaultPlan", "FinishedOutputError", "InjectedFailure", "Job", "JobAbortedError", "JobFailedError",
    "JobGraphError", "JobResult", "KeyedStream", "LocationError", "NotEnoughSlotsError", "RescaleError",
    "RestartBackoff", "RuntimeJobError", "Stream", "StoreUnavailableError", "TaskFailedError",
    "UnreachableLocationError", "UnstorableStateError", "WriterSettings",
]
