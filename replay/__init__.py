"""Replayers: rebuild a captured stream with any worker count, with exact frontiers and completed times.

Each name is imported from its module on first use (``eventlog._lazy``): ``from replay import Replayer`` does not
import ``replay.dataset`` (``pyarrow.dataset``, which imports pandas) or ``replay.copy``."""

from typing import TYPE_CHECKING

from eventlog._lazy import lazy_package

if TYPE_CHECKING:
    from .copy import copy
    from .dataset import dataset
    from .keyhash import hash_array, worker_of
    from .replayer import MODES, Replayer
    from .verify import VerifyReport, verify

lazy_package(__name__, {"copy": ".copy", "dataset": ".dataset", "hash_array": ".keyhash", "worker_of": ".keyhash",
                        "MODES": ".replayer", "Replayer": ".replayer", "VerifyReport": ".verify", "verify": ".verify"})

__all__ = ["MODES", "Replayer", "VerifyReport", "copy", "dataset", "hash_array", "verify", "worker_of"]
