"""Appending one part to its Kafka partition: one record per event (format 2.0), acknowledged on sync, one
writer at a time (FORMAT.md "Kafka log").

**Fencing.** Each part writer is a transactional producer with the transactional id
``<prefix>.<topic>.<part>`` (``KafkaTarget.transactional_id``). Opening calls ``init_transactions``, which
makes Kafka fence every earlier producer of that id and abort its open transaction; ``append`` opens a
transaction, ``sync`` (``Capture.advance_to``/``close``) commits it and returns only when it is committed.
Readers read committed records only, so they see exactly what ``sync`` acknowledged. A writer that was
fenced raises WriterFencedError at its next ``sync`` (or ``append``, once it knows): its unsynced events
were aborted, its synced ones stay. With ``eventlog.transactions=false`` the writer uses the log's shared
idempotent producer and ``sync`` waits for acknowledgements; nothing fences it then, but readers still
detect two writers by their epochs.

**Pipelining** (``sync="none"``: ``open_log(uri, sync="none")``, ``Capture(…, sync="none")`` or
``?eventlog.sync=none``). The default (``fsync``/``flush``) commits at every ``sync``: each ``advance_to`` is one
transaction, one commit round trip, and returns once its events are durable. A ``sync="none"`` writer keeps
its transaction open across ``advance_to`` calls while librdkafka sends the records in the background; its
``sync`` commits only when ``eventlog.commit.interval.ms`` (100 by default; 0 commits every time) has passed
since the first event not yet committed was appended. What it promises, exactly:

* when ``advance_to`` returns, every event appended at least the commit interval before it was called is
  committed, and so is every event before ``acknowledged_seq`` (what the writer knows was committed);
* when ``Capture.flush`` (``KafkaPartWriter.flush``) or ``close`` returns, every event appended is committed
  (``acknowledged_seq == next_seq``);
* committed means durable as the cluster's ``acks=all`` makes it, and visible to readers, which read committed
  records only: they never see an event before its commit, so never one that a crash then takes back;
* a crash (or SIGKILL) of the writer loses at most the events from ``acknowledged_seq`` on (all of them, unless
  it died inside a commit that completed): Kafka aborts the open transaction when the next writer of the
  part opens (or after ``transaction.timeout.ms``), as one piece, never half of it. The next
  writer continues after the last committed event and recovers the frontier from what was committed, so the
  application re-sends those times once (FORMAT.md §1.1), as after a crash of a default writer between two
  ``advance_to`` calls;
* errors are not deferred past the commit that meets them: a record Kafka refuses, or a fenced writer, raises
  ``DeliveryError`` / ``WriterFencedError`` at the ``advance_to``, ``flush`` or ``close`` that commits (or at
  an ``append``, once the producer knows); the uncommitted window is then aborted whole.

With ``eventlog.transactions=false`` the same rule decides when ``sync`` waits for the acknowledgements of
everything produced (``flush``); there, readers may see records before they are acknowledged, and a crash
can leave some of the unacknowledged ones, which the next writer's higher epoch voids (FORMAT.md §1.1).

**Epochs.** After fencing, the writer reads the tail of its partition: it continues after the last
sequence id, and its epoch is one more than the epoch of the last record. Every record it produces carries
``eventlog.epoch`` and ``eventlog.writer`` headers, which readers check.

**Lost data.** Opening raises LostDataError when the partition was emptied or lost its header record, when
the topic has fewer partitions than peers, and when the part ends before ``expect_next_seq`` (the position
the application saved): a writer never silently starts a new history at sequence id 1 over lost events.
Any delivery failure raises DeliveryError at ``sync`` — nothing is dropped quietly; after a failed or
fenced ``sync`` the writer is unusable (reopen the part).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import TYPE_CHECKING, Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from eventlog.encoding import SegmentEncoder
from eventlog.errors import CorruptLogError, DeliveryError, EventLogError
from eventlog.events import Event
from eventlog.header import StreamHeader
from eventlog.log import PartWriter

from .errors import LostDataError, WriterFencedError
from .records import MAX_EPOCH, WriterMark, event_headers, part_key, writer_headers

if TYPE_CHECKING:
    from .log import KafkaLog, PartTail

_rdkafka_log = logging.getLogger("eventlog.kafka.rdkafka")

_TAIL_PASSES = 5
"""Reading passes a writer makes over the end of its part when it opens (``_check_tail``)."""
# A sync waits in slices of at most this many seconds, and asks the cluster whether the part's topic still
# exists between them: records for a deleted topic are held by librdkafka for topic.metadata.propagation.max.ms
# (30 s) from the topic's first use before they fail, which is how long a tap attempt whose staging topics were
# swept away used to wait.
_SYNC_SLICE = 1.0

_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
           KafkaError.TRANSACTION_COORDINATOR_FENCED}


class KafkaPartWriter(PartWriter):
    """The writer of one part; opening it fences every earlier writer of the part (module doc)."""

    def __init__(self, log: "KafkaLog", header: StreamHeader, part: int, encoder: SegmentEncoder, *,
                 expect_next_seq: int | None = None, continues: bool = False, lazy: bool = False) -> None:
        self._log = log
        self.header = header
        self.stream = header.stream
        self.part = part
        self._topic = log.target.topic(header.stream)
        self._encoder = encoder
        # an encoder that can hand its value over as the buffer it wrote (the arrow record encoder's pyarrow
        # buffer), which the producer takes as it is: no copy of the event in Python
        self._encode: Callable[[int, Event], object] = getattr(encoder, "encode_value", encoder.encode)
        self._errors: list[str] = []
        self._fatal: list[KafkaError] = []
        self._failed: EventLogError | None = None
        self._unlisted = 0  # metadata answers in a row without the part's topic (_check_topic)
        self._in_txn = False
        self._synced: int | None = None  # the first seq not yet committed (known once the tail was read)
        self._lazy = lazy  # sync="none": sync() commits only once the log's commit interval has passed
        self._pending_since: float | None = None  # when the first event not yet synced was appended
        self.writer: WriterMark | None = None
        """This writer's epoch and id, carried by every record it produces (set once opened)."""
        self.transactional = log.target.transactions
        """True when this writer is a transactional producer that fences earlier writers."""
        self.transactional_id = log.target.transactional_id(self._topic, part) if self.transactional else None
        """The Kafka transactional id of the part (None without transactions)."""
        self._producer: Producer | None = None
        if self.transactional:
            self._producer = Producer(log.target.producer(**{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                # a record the cluster did not take within the log's timeout fails its sync (DeliveryError)
                "message.timeout.ms": int(min(log.timeout, 60.0) * 1000),
                "transactional.id": self.transactional_id,
                "error_cb": self._on_error,
                "logger": _rdkafka_log,  # a fenced producer's fatal error is ours to raise, not to print
            }))
            self._connect(min(log.timeout, 2.0))
            self._call(lambda p: p.init_transactions(log.timeout),
                       "fence earlier writers (init_transactions; for a cluster without transactions, set "
                       "eventlog.transactions=false)")
        else:
            self._producer = log.producer()
        tail = log.tail(header.stream, part, complete=True)  # completes a creation its creator left unfinished
        self._next = tail.last_seq + 1
        if expect_next_seq is not None and self._next < expect_next_seq:
            self._producer = None
            raise LostDataError(
                f"the part ends at seq {tail.last_seq} (kafka offsets {tail.low}..{tail.high}), but the application "
                f"expects to continue from seq {expect_next_seq}: events {self._next}..{expect_next_seq - 1} are "
                f"gone (topic deleted and recreated, a broker that lost its data, retention); refusing to start "
                f"another history", stream=self.stream, part=part, seq=self._next, offset=tail.high)
        if tail.high > 1:  # the header record, then events (or records that only look like some)
            try:
                self._check_tail(tail)
            except BaseException:
                self._producer = None
                raise
        previous = tail.writer.epoch if tail.writer is not None else 0
        if previous >= MAX_EPOCH:
            self._producer = None
            raise CorruptLogError(f"the last record has writer epoch {previous}: no next epoch",
                                  stream=self.stream, part=part, seq=tail.last_seq)
        if continues and tail.last_seq > 0:  # the same history goes on: nothing of it is void
            self.writer = tail.writer if tail.writer is not None else WriterMark(0, None)
        else:
            self.writer = WriterMark(previous + 1, secrets.token_hex(8))
        self._headers = writer_headers(self.writer)
        self._key = part_key(part)
        self._synced = self._next
        self.records_sent = 0
        """Kafka records produced by this writer."""

    def _check_tail(self, tail: "PartTail") -> None:
        """Read the end of the part as a reader does, from the event before the last one to the partition's end:
        a writer never appends behind records its readers refuse (garbage, a value of another schema, lying
        headers, a replayed record, a gap), which would leave every event it acknowledges unreadable. The last
        event a reader delivers must be the one the tail names; CorruptLogError otherwise, naming the record."""
        start = max(1, tail.last_seq - 1)
        last = 0
        try:
            with self._log.reader(self.stream, self.part, start=start) as reader:
                for _ in range(_TAIL_PASSES):  # a pass may end before the partition's end (the consumer's queue)
                    read = 0
                    for entry in reader:
                        read += 1
                        last = max(last, entry.seq)
                    if not read and last >= tail.last_seq:
                        break
        except EventLogError as e:
            raise CorruptLogError(
                f"the part ends with a record its readers refuse ({e.reason}): a writer does not append behind it "
                f"(a foreign or buggy producer wrote to the stream's topic; `replay verify {self._log.uri} {self.stream}` "
                "lists the records, a new stream is the way on)", stream=self.stream, part=self.part, seq=e.seq, offset=e.offset) from None
        if last != tail.last_seq:
            raise CorruptLogError(
                f"the part's last record says seq {tail.last_seq} (kafka offset {tail.high - 1} or before) but its "
                f"readers deliver up to seq {last or 'none'}: a record was written behind the part's writer (a replayed "
                f"or foreign record); a writer does not append behind it (`replay verify {self._log.uri} {self.stream}` "
                "lists the records)",
                stream=self.stream, part=self.part, seq=tail.last_seq)

    @property
    def epoch(self) -> int:
        """This writer's epoch: one more than the epoch of the part's last record when it opened."""
        assert self.writer is not None
        return self.writer.epoch

    @property
    def next_seq(self) -> int:
        return self._next

    @property
    def acknowledged_seq(self) -> int:
        """One past the last event Kafka acknowledged: every event with a lower sequence id is durable (committed,
        so visible to read_committed readers) and survives a crash of this writer; the events from here to
        ``next_seq`` are not yet. Equal to ``next_seq`` after every ``sync`` of the default mode; behind it
        between the commits of a ``sync="none"`` writer (module doc, "Pipelining")."""
        return self._synced if self._synced is not None else self._next

    def _connect(self, timeout: float) -> None:
        """Open the producer's broker connections before ``init_transactions``: asked before the coordinator's
        connection is up, librdkafka retries the producer id request only after 500 ms, which cost 4 openings
        in 10 half a second. A metadata request for all topics makes it connect to the brokers (one for our
        topic alone did not, measured). A failure here is left to ``init_transactions`` to report."""
        assert self._producer is not None
        try:
            self._producer.list_topics(timeout=timeout)
        except KafkaException:
            pass

    # -- errors ----------------------------------------------------------------------------------------

    def _on_delivery(self, err, msg) -> None:  # noqa: ANN001
        if err is not None:
            self._errors.append(f"{err.str()} ({msg.topic()}[{msg.partition()}])")

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal.append(err)

    def _unsynced(self) -> str:
        return f"events from seq {self._synced} on were not committed" if self._synced is not None else \
            "nothing was written"

    def _fenced(self, err: KafkaError) -> WriterFencedError:
        epoch = f", writer epoch {self.writer.epoch}" if self.writer is not None else ""
        return WriterFencedError(
            f"another writer opened this part and Kafka fenced this one (transactional id "
            f"{self.transactional_id!r}{epoch}); {self._unsynced()} ({err.str()})",
            stream=self.stream, part=self.part, seq=self._synced)

    def _fail(self, error: EventLogError) -> EventLogError:
        """Make the writer unusable: every later append/sync raises ``error`` again."""
        self._failed = error
        return error

    def _check_usable(self) -> None:
        if self._failed is not None:
            e = self._failed
            raise type(e)(e.reason, **e.location())
        if self._producer is None:
            raise EventLogError("writer is closed", stream=self.stream, part=self.part)
        if self.transactional:
            self._poll(0)  # serves error_cb: a fenced producer learns it here
            if self._fatal:
                self._raise_kafka(self._fatal[0], "write")

    def _poll(self, timeout: float) -> None:
        """Serve the producer's callbacks; a fatal error it raises (a fenced transactional producer) becomes
        WriterFencedError or DeliveryError, and the writer unusable."""
        assert self._producer is not None
        try:
            self._producer.poll(timeout)
        except KafkaException as e:
            self._raise_kafka(e.args[0], "write")

    def _raise_kafka(self, err: KafkaError, what: str) -> None:
        if err.code() == KafkaError._FATAL:  # "Local: Fatal error": the producer's own fatal error says why
            err = self._fatal_reason(err)
        if err.code() in _FENCED:
            raise self._fail(self._fenced(err))
        raise self._fail(DeliveryError(f"kafka failed to {what}: {err.str()}; {self._unsynced()}",
                                       stream=self.stream, part=self.part, seq=self._synced))

    def _fatal_reason(self, err: KafkaError) -> KafkaError:
        """The fatal error behind a call refused with ``_FATAL``: librdkafka raises it before the producer's
        error callback has reported it (a producer fenced between ``_check_usable`` and ``produce``), so serve
        the callbacks once: the poll reports it to the callback or raises it itself (a fenced transactional
        producer's ``_FENCED``); ``err`` itself if neither did."""
        if not self._fatal and self._producer is not None:
            try:
                self._producer.poll(0)
            except KafkaException as e:
                return e.args[0]
        return self._fatal[0] if self._fatal else err

    def _call(self, op: Callable[[Producer], object], what: str, *, deadline: float | None = None) -> None:
        """Run a transaction call, retrying what Kafka calls retriable; a fenced producer raises
        WriterFencedError, an abortable failure aborts the transaction and raises DeliveryError. With a
        ``deadline`` (``time.monotonic()``), ``op`` waits a slice at a time: each time it times out, the part's
        topic is checked (LostDataError when deleted) and it runs again until the deadline."""
        assert self._producer is not None
        for _ in range(100 if deadline is None else 100 + int(self._log.timeout / _SYNC_SLICE)):
            try:
                op(self._producer)
                return
            except KafkaException as e:
                err: KafkaError = e.args[0]
                if err.code() in _FENCED or err.fatal():
                    self._raise_kafka(err, what)
                if err.txn_requires_abort():
                    try:
                        self._producer.abort_transaction(self._log.timeout)
                    except KafkaException:
                        pass
                    self._in_txn = False
                    self._raise_kafka(err, what)
                if not err.retriable():
                    self._raise_kafka(err, what)
                if deadline is not None and err.code() == KafkaError._TIMED_OUT:
                    self._check_topic(deadline)
                    if time.monotonic() >= deadline:
                        self._raise_kafka(err, what)
        raise self._fail(DeliveryError(f"kafka failed to {what}: still retriable after 100 attempts",
                                       stream=self.stream, part=self.part))

    def _slice(self, deadline: float) -> float:
        """How long the next slice of a wait until ``deadline`` lasts."""
        return max(0.0, min(_SYNC_SLICE, deadline - time.monotonic()))

    def _check_topic(self, deadline: float) -> None:
        """Raise LostDataError, the writer unusable, when the part's topic no longer exists (deleted while this
        writer wrote to it): missing from two metadata answers in a row (one could come from a broker that is
        catching up after a restart). A cluster that does not answer is left to the wait's own ``deadline``."""
        try:
            listed = self._log.topic_listed(self._topic, max(0.1, min(5.0, deadline - time.monotonic())))
        except EventLogError:
            return
        if listed:
            self._unlisted = 0
            return
        self._unlisted += 1
        if self._unlisted >= 2:
            raise self._fail(LostDataError(
                f"topic {self._topic!r} was deleted while this writer wrote to it: its events from seq "
                f"{self._synced} on are not in the log", stream=self.stream, part=self.part, seq=self._synced))

    def _raise_errors(self) -> None:
        self._errors.extend(e for e in self._log.fatal_errors() if e not in self._errors)
        if self._errors:
            first, n = self._errors[0], len(self._errors)
            raise DeliveryError(f"kafka did not acknowledge {n} record(s): {first}", stream=self.stream,
                                part=self.part)

    # -- writing ---------------------------------------------------------------------------------------

    def append(self, event: Event) -> int:
        self._check_usable()
        if not self.transactional:
            self._raise_errors()
        seq = self._next
        value = self._encode(seq, event)  # LimitError before anything is produced
        producer = self._producer
        assert producer is not None
        if self.transactional and not self._in_txn:
            self._call(lambda p: p.begin_transaction(), "begin a transaction")
            self._in_txn = True
        headers = event_headers(seq, event, self._headers)
        while True:
            try:
                producer.produce(self._topic, value=value, key=self._key, partition=self.part, headers=headers,
                                 on_delivery=self._on_delivery)
                break
            except BufferError:  # the producer's queue is full: let it deliver, then retry
                self._poll(0.05)
            except KafkaException as e:
                err: KafkaError = e.args[0]
                if err.code() in _FENCED or err.fatal() or err.code() == KafkaError._FATAL:
                    self._raise_kafka(err, "produce")
                raise DeliveryError(f"kafka refused the record of seq {seq} (nothing of it was written): {err.str()}",
                                    stream=self.stream, part=self.part, seq=seq) from None
        self._poll(0)
        self.records_sent += 1
        self._next = seq + 1
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        return seq

    def sync(self, *, force: bool = False) -> None:
        """Commit (transactional) or flush what was appended and wait for Kafka. A ``sync="none"`` writer does
        so only once its commit interval has passed since the first event not yet synced (``force``: now)."""
        if self._producer is None and self._failed is None:
            return
        self._check_usable()
        if (self._lazy and not force and self._pending_since is not None
                and time.monotonic() - self._pending_since < self._log.target.commit_interval):
            return
        if self.transactional:
            if self._in_txn:
                deadline = time.monotonic() + self._log.timeout
                self._call(lambda p: p.commit_transaction(self._slice(deadline)), "commit the transaction",
                           deadline=deadline)
                self._in_txn = False
            if self._errors:  # a commit that succeeded delivered everything; this is a safety net
                raise self._fail(DeliveryError(f"kafka did not acknowledge a record: {self._errors[0]}",
                                               stream=self.stream, part=self.part, seq=self._synced))
        else:
            deadline = time.monotonic() + self._log.timeout
            remaining = self._producer.flush(self._slice(deadline))  # type: ignore[union-attr]
            while remaining and time.monotonic() < deadline:
                self._check_topic(deadline)
                remaining = self._producer.flush(self._slice(deadline))  # type: ignore[union-attr]
            self._raise_errors()
            if remaining:
                raise DeliveryError(f"{remaining} record(s) not acknowledged within {self._log.timeout} s",
                                    stream=self.stream, part=self.part)
        self._synced = self._next
        self._pending_since = None

    def flush(self) -> None:
        """Commit (or flush) every event appended so far and wait for Kafka, whatever the sync mode: on return
        ``acknowledged_seq == next_seq``. The way for a ``sync="none"`` writer to make its events durable at a
        point of its choosing (before it reports them done elsewhere, at a checkpoint)."""
        self.sync(force=True)

    def close(self) -> None:
        """Sync (commit), then release the part. A writer that failed or was fenced releases silently: its
        error was raised already."""
        if self._producer is None:
            return
        try:
            if self._failed is None:
                self.sync(force=True)
        finally:
            self._producer = None
