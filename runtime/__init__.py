"""The Spark-hosted streaming runtime: operators exchanging bundles over log channels, with exactly-once
checkpoints, failover and rescale (Ray Streaming's design, hosted on Spark). See ``docs/runtime.md``.

    from runtime import Job
    job = Job("wordcount")
    lines = job.from_generator(read_lines, parts=4, parallelism=2)
    words = lines.flat_map(lambda r: [{"word": w} for w in r["line"].split()])
    words.key_by("word").window(10).count().to_log("file:///tmp/out", "counts", schema=schema)
    job.run(spark, channels="file:///tmp/ch", checkpoints="file:///tmp/ck", checkpoint_interval=1.0)

Layers, bottom to top; a module imports only from layers below its own, and from its own package's lower
modules (each sub-package's ``__init__`` lists its order). Nothing imports upwards, not even inside a function
(the one exception: the channel factory imports the Kafka channels, and so ``confluent_kafka``, only for a
``kafka://`` URI), and nothing under ``TYPE_CHECKING``.

1. ``errors`` (typed errors), ``faults`` (failure injection)
2. ``checkpoints/``: storage (the runtime's files on ``connectors.files.storage``), formats, run marks, key
   groups, keyed state, the checkpoint store, the checkpoint coordinator
3. ``channels/``: message payloads and barriers, the channel-log interface, its file and Kafka kinds, writers
   and readers, and ``open_channel_store`` above the kinds (a file channel leaves a run mark of ``checkpoints``)
4. ``operators``, then ``sources``, ``sinks`` (sinks stage channel payloads in the checkpoint store), ``connect``
   (union, connected streams) and ``joins`` (windowed, interval and table joins)
5. ``graph`` (the job graph's nodes and the physical plan of a run: tasks and channels)
6. ``locations`` (the locations of a run, checked before it starts), ``master`` (the job master on the
   driver), ``task`` (one operator instance at work)
7. ``executors/``: ``local`` (tasks as threads) and ``spark`` (tasks of a barrier-mode Spark job)
8. ``failover`` (``run_job``: generations, restarts from checkpoints)
9. ``job`` (the public API that builds a job and runs it: ``Job.run`` calls ``run_job``)
"""

from .channels.writer import WriterSettings
from .checkpoints.keygroups import DEFAULT_KEY_GROUPS
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
from .job import ConnectedStreams, Job, JoinedStreams, KeyedStream, Stream
from .sources import Advance

__all__ = [
    "Advance", "ChannelError", "CheckpointCorruptError", "CheckpointError", "ConnectedStreams", "DEFAULT_KEY_GROUPS",
    "Fault", "FaultPlan", "FinishedOutputError", "InjectedFailure", "Job", "JobAbortedError", "JobFailedError",
    "JobGraphError", "JobResult", "JoinedStreams", "KeyedStream", "LocationError", "NotEnoughSlotsError",
    "RescaleError", "RestartBackoff", "RuntimeJobError", "Stream", "StoreUnavailableError", "TaskFailedError",
    "UnreachableLocationError", "UnstorableStateError", "WriterSettings",
]
