"""Run marks: how a task knows it sees the folders the driver prepared for its generation.

Before each generation the driver writes a *run mark* — the generation and a random token — into the folders it
prepared for it: the checkpoint store (a local folder or an S3 prefix) and the generation's file channels
(``write_mark``). Each task reads the marks back before it starts (``check_mark``); a task on a host that does
not share the disk — or that reaches another S3 endpoint or bucket than the driver's, or none (no credentials,
the store does not answer) — finds no mark (or another run's) and fails with ``UnreachableLocationError`` naming
the folder and its host, instead of writing checkpoints and channel data nobody else sees.
"""

from __future__ import annotations

import secrets
import socket

from ..errors import CheckpointCorruptError, StoreUnavailableError, UnreachableLocationError
from .formats import encode_document, read_document
from .storage import open_state_fs

MARK = "_RUN"
"""File name of the run mark in a prepared folder."""


def new_token() -> str:
    """A random token for one generation's run marks."""
    return secrets.token_hex(8)


def write_mark(folder: str, generation: int, token: str) -> None:
    """Write the run mark of ``generation`` into ``folder`` — a local path or an ``s3://`` location
    (``runtime.checkpoints.storage``) — (the driver, before the generation's tasks start)."""
    fs, path = open_state_fs(folder)
    fs.make_dirs(path)
    fs.write(fs.join(path, MARK), encode_document("run", {"generation": generation, "token": token}))


def check_mark(folder: str, generation: int, token: str, *, what: str, uri: str, task: str) -> None:
    """Raise ``UnreachableLocationError`` unless ``folder`` (a local path or an ``s3://`` location) holds the
    run mark of ``generation`` with ``token`` (a task, before it starts); ``what`` names the folder's role,
    ``uri`` the location the user gave."""
    why = None
    objects = False
    try:
        fs, folder_path = open_state_fs(folder)
        objects = fs.objects
        path = fs.join(folder_path, MARK)
        shown = fs.display(path)
        if not fs.exists(path):
            why = f"{shown} does not exist here"
        else:
            try:
                body = read_document(path, "run", limit=4096, fs=fs)
            except CheckpointCorruptError as e:
                why = f"{shown} cannot be read: {e.reason}"
            else:
                if body.get("generation") != generation or body.get("token") != token:
                    why = f"{shown} holds another run's mark (generation {body.get('generation')})"
    except StoreUnavailableError as e:
        objects = True
        why = f"the store cannot be reached: {e}"
    if why is not None:
        where = ("the object store must be reachable from every executor with the driver's endpoint, bucket and "
                 "credentials (the AWS_* settings in spark.executorEnv.*)" if objects else
                 "the location must be on a disk every executor shares with the driver (or, for channels, kafka://)")
        raise UnreachableLocationError(
            f"task {task} on host {socket.gethostname()} does not see the {what} {uri!r} the driver prepared for "
            f"generation {generation}: {why}; {where}")
