"""Replayers: rebuild a captured stream with any worker count, with exact frontiers and completed times."""

from .copy import copy
from .dataset import dataset
from .keyhash import hash_array, worker_of
from .replayer import MODES, Replayer
from .verify import VerifyReport, verify

__all__ = ["MODES", "Replayer", "VerifyReport", "copy", "dataset", "hash_array", "verify", "worker_of"]
