"""Property tests of committed reads (replay/committed.py, FORMAT.md §1.1) over any history of a part:
incarnations of its writer that send and advance at random, crash at random points, and restart from the
recovered frontier re-sending with other records."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog.events import Entry, Messages, Progress
from eventlog.parts.committed import CommittedPart
from eventlog.parts.rules import PartProgress


def _batch(tag: int) -> pa.RecordBatch:
    return pa.record_batch({"tag": [tag]})


@st.composite
def histories(draw):
    """``(entries with epochs, expected delivered tags)``: each incarnation starts at the recovered frontier,
    sends at times at or after its frontier and advances it; every one but the last crashes (the last may
    finish). A message is delivered when its own incarnation's frontier passed its time (else it is void, or
    — in the last incarnation — held: then it and the messages after it stay held)."""
    entries: list[tuple[Entry, int]] = []
    runs: list[tuple[list[tuple[int, int]], int | None]] = []  # per incarnation: (sent, frontier at its end)
    frontier: int | None = 0
    seq = tag = 0
    n_inc = draw(st.integers(1, 4))
    for inc in range(1, n_inc + 1):
        sent: list[tuple[int, int]] = []  # (time, tag) of this incarnation, in order
        for _ in range(draw(st.integers(0, 8))):
            assert frontier is not None
            if draw(st.booleans()):
                t = frontier + draw(st.integers(0, 3))
                seq += 1
                tag += 1
                entries.append((Entry(seq, Messages(t, _batch(tag))), inc))
                sent.append((t, tag))
            else:
                new = frontier + draw(st.integers(1, 3))
                seq += 1
                entries.append((Entry(seq, Progress(((frontier, -1), (new, 1)))), inc))
                frontier = new
        if inc == n_inc and draw(st.booleans()):
            seq += 1
            entries.append((Entry(seq, Progress(((frontier, -1),))), inc))
            frontier = None
        runs.append((sent, frontier))
    # an incarnation that wrote nothing is invisible: the last one that wrote something ends the history
    written = {ep for _, ep in entries}
    last = max(written, default=0)
    delivered: list[int] = []
    for inc, (sent, end) in enumerate(runs, start=1):
        if inc < last:  # a later incarnation wrote: what this one had not committed is void
            delivered += [tg for t, tg in sent if end is None or t < end]
        elif inc == last:  # in sequence order, up to the first message its part has not committed
            for t, tg in sent:
                if end is not None and t >= end:
                    break
                delivered.append(tg)
    return entries, delivered


def _run(cp: CommittedPart, entries) -> list[Entry]:
    out: list[Entry] = []
    for entry, epoch in entries:
        out += cp.push(entry, epoch)
    return out


def _tags(entries: list[Entry]) -> list[int]:
    return [e.event.records.column("tag")[0].as_py() for e in entries if isinstance(e.event, Messages)]


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_committed_view_is_valid_and_holds_one_version_of_each_time(history):
    entries, delivered = history
    out = _run(CommittedPart(0, stream="s", part=0), entries)
    assert _tags(out) == delivered
    rules = PartProgress(0)  # a valid part stream: released messages precede the progress that passes them
    for e in out:
        if isinstance(e.event, Messages):
            rules.messages(e.seq, e.event.time)
        else:
            rules.progress(e.seq, e.event.updates)
    messages = [e.seq for e in out if isinstance(e.event, Messages)]
    assert messages == sorted(messages)  # messages keep their order (a Progress event may go ahead of held ones)
    progress = [e.seq for e in out if isinstance(e.event, Progress)]
    assert progress == sorted(progress)  # (some may still wait behind a blocked message at the end)


@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_resuming_at_any_position_releases_exactly_the_rest(history, data):
    entries, _ = history
    whole = _tags(_run(CommittedPart(0), entries))
    cut = data.draw(st.integers(0, len(entries)))
    first = CommittedPart(0)
    before = _run(first, entries[:cut])
    position = first.first_held or (entries[cut - 1][0].seq + 1 if cut else 1)
    resumed = CommittedPart(0)
    for entry, _ in entries:
        if entry.seq < position and isinstance(entry.event, Progress):
            resumed.restore(entry.event.updates, entry.seq)
    after = _run(resumed, [(e, ep) for e, ep in entries if e.seq >= position])
    assert _tags(before) + _tags(after) == whole


def test_a_replayer_resumes_before_a_held_message_even_when_progress_went_ahead(tmp_path):
    """A Progress event released ahead of a held message does not move the position past that message."""
    import pyarrow as pa

    from capture import Capture
    from replay import Replayer

    root = str(tmp_path / "log")
    cap = Capture(root, "s", 0, 1, schema=pa.schema([("tag", pa.int64())]))
    cap.send(3, [{"tag": 1}])   # seq 1: held (time 3 not complete)
    cap.advance_to(2)            # seq 2: passes nothing held: released ahead of it
    with Replayer(root, "s") as r:
        r._poll()  # read ahead: the Progress event is released (buffered), the message held
        assert r.position == {0: 1}
        events = list(r)
        assert [type(e).__name__ for e in events] == ["Progress"]
        position = r.position
    assert position == {0: 1}
    cap.advance_to(4)            # seq 3: commits the message at 3
    cap.close()
    with Replayer(root, "s", start=position) as r:
        got = [t for t, table in r.completed() for _ in table.to_pylist()]
    assert got == [3]
