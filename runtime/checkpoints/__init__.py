"""Checkpoints: what a job saves so that a restart resumes it exactly once, and where it keeps it.

Bottom to top: ``storage`` (where the runtime's own files live: a local folder or S3, on the file log's storage
layer ``connectors.files.storage``); ``formats`` (checkpoint files that run no code when read: task snapshots
and checksummed JSON documents); ``marks`` (the run marks a task checks before it starts); ``keygroups`` (the
unit in which keyed state moves on a rescale), ``keyedstate`` (keyed state as Arrow tables) and ``rowbuffer``
(buffered input rows of joins as keyed state tables); ``store`` (the
checkpoint store of one job: counters, snapshots, manifests, the commit horizon, choosing where to restore);
``coordinator`` (the driver's checkpoint coordinator).
"""
