"""Typed errors of the streaming runtime (all are ``eventlog.errors.EventLogError``, so they pickle with
their location and cross Spark's process boundary intact)."""

from __future__ import annotations

from eventlog.errors import EventLogError, StorageUnavailableError


class RuntimeJobError(EventLogError):
    """Base class of the runtime's errors."""


class JobGraphError(RuntimeJobError, ValueError):
    """The job graph is invalid: a cycle, an operator without a sink, a parallelism below 1, a name used twice."""


class JobFailedError(RuntimeJobError):
    """The job failed more often than ``max_restarts`` allows (or ran out of time); the message names the
    last task failure."""


class TaskFailedError(RuntimeJobError):
    """A task (operator instance) failed; raised inside the task and reported to the job master."""


class InjectedFailure(TaskFailedError):
    """A failure injected on purpose by ``runtime.faults`` (tests, benchmarks)."""


class JobAbortedError(RuntimeJobError):
    """The job master told this task to stop because another task failed (the generation is over)."""


class ChannelError(RuntimeJobError):
    """A channel's bytes or ids are wrong: a bad bundle, a gap in message ids, a barrier out of order."""


class CheckpointError(RuntimeJobError):
    """A checkpoint cannot be written, read or restored (a missing task state, a torn manifest)."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is damaged or not one the runtime wrote: bad magic, an unsupported version, a
    length or checksum mismatch, a truncated or missing file, malformed JSON or Arrow data, a field of the
    wrong type, or state stored with a serializer its operator does not opt in to (``pickle``). The error
    names the file. The driver then falls back to the previous complete checkpoint (``docs/runtime.md``,
    "Damaged checkpoints"); it raises this error when no usable checkpoint remains."""


class UnstorableStateError(CheckpointError, TypeError):
    """An operator keeps state that its serializer cannot store exactly (e.g. a ``set`` accumulator with the
    default serializer): raised when the checkpoint is taken, naming the operator and the value's type. The
    job fails at once (every retry would fail the same way); pass ``serializer="pickle"`` to the operator
    to opt in to pickle, or keep JSON- or Arrow-representable values."""


class FinishedOutputError(CheckpointError):
    """A log sink's output part is finished (an earlier run wrote it to the end) and the job's checkpoints do
    not list it: a new run cannot write it again. The job fails at once, without restarts."""


class RescaleError(RuntimeJobError, ValueError):
    """A checkpoint cannot be restored with the requested parallelisms (e.g. a sink with more instances
    than output parts)."""


class NotEnoughSlotsError(RuntimeJobError):
    """Spark cannot gang-schedule every operator instance at once: barrier mode needs one task slot per
    instance (``local[N]`` with N >= the total parallelism; on a cluster, that many cores of live executors,
    which the driver waits for up to ``Job.run(slot_timeout=…)`` seconds before each generation)."""


class LocationError(RuntimeJobError, ValueError):
    """A run's checkpoint, channel, input or output location cannot work, found before the job starts: a
    relative path or ``memory://`` URI when tasks run in Spark's processes (each executor would resolve it in
    its own work folder or memory), or a URI scheme that kind of location does not support (checkpoints on
    anything but a filesystem path or ``s3://``, channels on anything but a path or ``kafka://``). The message
    names the location, its kind and what would work."""


class StoreUnavailableError(CheckpointError, StorageUnavailableError):
    """The object store holding the job's checkpoints and sinks' staging files failed a request for another
    reason than a missing object — it does not answer, refuses the request or times out, after its client's own
    retries (``runtime.checkpoints.storage``). The message names the object and the host that asked. A task that hits it
    fails its generation (the driver restarts it from the last checkpoint); a driver that hits it fails the run
    with it."""


class UnreachableLocationError(RuntimeJobError):
    """A task does not see a folder the driver prepared for the run (the checkpoint store, or the file
    channels of the generation): its executor does not share that disk with the driver, or cannot reach the
    object store (``s3://``) the driver wrote to (another endpoint, no credentials). Raised by the task
    before it starts (naming the folder and the task's host); the job fails at once, since every retry
    would fail the same way."""
