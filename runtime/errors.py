"""Typed errors of the streaming runtime (all are ``eventlog.errors.EventLogError``, so they pickle with
their location and cross Spark's process boundary intact)."""

from __future__ import annotations

from eventlog.errors import EventLogError


class RuntimeJobError(EventLogError):
    """Base class of the runtime's errors."""


class JobGraphError(RuntimeJobError, ValueError):
    """The job graph is invalid: a cycle, an operator without a sink, a parallelism below 1, a name used twice."""


class JobFailedError(RuntimeJobError):
    """The job failed more often than ``max_restarts`` allows; the message names the last task failure."""


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


class RescaleError(RuntimeJobError, ValueError):
    """A checkpoint cannot be restored with the requested parallelisms (e.g. a sink with more instances
    than output parts)."""


class NotEnoughSlotsError(RuntimeJobError):
    """Spark cannot gang-schedule every operator instance at once: barrier mode needs one task slot per
    instance (``local[N]`` with N >= the total parallelism)."""
