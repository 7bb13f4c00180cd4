"""``replay ui`` and ``replay top``: watching a log live (docs/ui.md).

* ``watch`` — the state of a log's streams, read cheaply and kept up to date by ``LogWatch.poll`` (each part's
  frontier, lag, rates, stalls, recent times, a few minutes of history);
* ``records`` — the records of one time, as ``replay cat --since T`` shows them;
* ``jobs`` — the runtime's jobs, read from the status file each job master writes (``runtime.status``);
* ``pump`` — polls a ``LogWatch`` on a thread while someone watches, and not at all otherwise;
* ``metrics`` — the Prometheus metrics (``prometheus_client``);
* ``server`` — the HTTP server: the page (``static/``, served from the package), server-sent events, JSON, /metrics.

Nothing here is imported by another command: ``replay ls`` or ``replay --version`` never load it.
"""
