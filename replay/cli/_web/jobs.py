"""The runtime's jobs, as ``replay ui --jobs CHECKPOINTS`` shows them: the status file each job's driver writes
beside its checkpoints (``runtime.status``: ``<checkpoints>/<job>/_STATUS.json``), read from the local disk or S3.

``JobsWatch.poll()`` lists the job folders of every location given and reads their status files; a job whose
file was not rewritten for a while (``stale_after`` seconds past its interval) is marked ``stale``: its driver
stopped without writing a final status (killed), or cannot reach the store.
"""

from __future__ import annotations

import time as _time
from typing import Any

from runtime.status import STATUS_FILE, read_status


class JobsWatch:
    """The jobs under each checkpoint location of ``locations`` (paths, ``file://`` or ``s3://`` URIs)."""

    def __init__(self, locations: tuple[str, ...], *, stale_after: float = 10.0) -> None:
        from runtime.checkpoints.storage import open_state_fs

        self.locations = tuple(locations)
        self.stale_after = stale_after
        self._fs = [open_state_fs(loc) for loc in self.locations]
        self.errors: list[str] = []
        self._jobs: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        """Read every job's status now; returns the jobs (each the status document, with ``location`` and
        ``stale`` added), by location then name."""
        jobs: list[dict[str, Any]] = []
        errors: list[str] = []
        now = _time.time() * 1000
        for loc, (fs, base) in zip(self.locations, self._fs):
            try:
                names = fs.list(base)
            except Exception as e:  # noqa: BLE001 - shown on the page, the watch goes on
                errors.append(f"cannot list {loc}: {e}")
                continue
            for name in names:
                doc = read_status(fs, fs.join(base, name, STATUS_FILE))
                if doc is None:
                    continue
                doc["location"] = loc
                running = doc.get("status") == "running"
                age = (now - doc.get("updated_ms", 0)) / 1000
                doc["stale"] = running and age > self.stale_after + float(doc.get("interval_s") or 0)
                doc["age_s"] = round(age, 1)
                jobs.append(doc)
        self.errors = errors
        self._jobs = jobs
        return jobs

    def jobs(self) -> list[dict[str, Any]]:
        """The jobs of the last poll."""
        return self._jobs
