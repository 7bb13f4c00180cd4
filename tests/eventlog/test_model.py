"""Times, antichains, counted frontiers and change batches."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog import Antichain, ChangeBatch, InvalidTimeError, MutableAntichain, ProgressError, TimeType
from eventlog.time import less_equal


def test_time_types_parse_and_check():
    assert TimeType.parse("int64").minimum == 0
    p = TimeType.parse("product:3")
    assert p.minimum == (0, 0, 0) and p.name == "product:3"
    assert p.check([1, 2, 3]) == (1, 2, 3)
    for bad in ["int32", "product:0", "product:x", ""]:
        with pytest.raises(InvalidTimeError):
            TimeType.parse(bad)
    i = TimeType.parse("int64")
    for bad in [-1, 2**63, 1.5, True, "3", (1,)]:
        with pytest.raises(InvalidTimeError):
            i.check(bad)
    for bad in [(1, 2), (1, 2, -3), 5, (1, 2, "3")]:
        with pytest.raises(InvalidTimeError):
            p.check(bad)


def test_product_order_is_partial():
    assert less_equal((1, 2), (1, 3)) and less_equal((1, 2), (2, 2))
    assert not less_equal((1, 3), (2, 2)) and not less_equal((2, 2), (1, 3))


def test_antichain_keeps_minimal_elements():
    a = Antichain([(1, 3), (2, 2), (2, 3), (1, 4)])
    assert a.elements == ((1, 3), (2, 2))
    assert a.less_equal((2, 3)) and a.less_equal((5, 2)) and not a.less_equal((1, 2))
    assert Antichain([5, 3, 7]).elements == (3,)
    assert Antichain().is_empty() and not Antichain().less_equal(0)
    assert Antichain([1]).dominates(Antichain([2])) and not Antichain([2]).dominates(Antichain([1]))
    assert Antichain([1]).dominates(Antichain())


def test_mutable_antichain_reports_frontier_changes():
    m = MutableAntichain([(0, 1)])
    assert list(m.frontier) == [0]
    assert m.update_iter([(0, -1), (3, 1)]) == ((0, -1), (3, 1))
    assert m.update_iter([(5, 1)]) == ()  # 5 is behind 3 in the frontier: no change
    assert m.update_iter([(3, -1)]) == ((3, -1), (5, 1))
    with pytest.raises(ProgressError):
        m.update_iter([(7, -1)])
    assert list(m.frontier) == [5]  # a failed update applies nothing
    m.update_iter([(5, -1)])
    assert m.frontier.is_empty() and m.is_empty()


def test_change_batch_consolidates():
    cb = ChangeBatch([(3, 1), (1, -1), (3, -1), (2, 2), (2, 1)])
    assert cb.consolidated() == ((1, -1), (2, 3))
    assert cb.drain() == ((1, -1), (2, 3)) and cb.is_empty()


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 3))))
def test_change_batch_matches_a_naive_sum(updates):
    sums: dict = {}
    for t, d in updates:
        sums[t] = sums.get(t, 0) + d
    assert ChangeBatch(updates).consolidated() == tuple(sorted((t, d) for t, d in sums.items() if d))


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=12))
def test_antichain_elements_are_minimal_and_cover(times):
    a = Antichain(times)
    for x in a:
        for y in a:
            assert x == y or not less_equal(x, y)
    for t in times:
        assert a.less_equal(t)


def test_errors_keep_their_location_when_pickled():
    import pickle

    from eventlog import CorruptLogError

    e = CorruptLogError("bad", stream="s", part=2, seq=7, offset=40, path="/x")
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is CorruptLogError and str(e2) == str(e)
    assert (e2.stream, e2.part, e2.seq, e2.offset, e2.path) == ("s", 2, 7, 40, "/x")


def test_a_messages_event_prints_its_records_and_keeps_a_short_repr():
    """``print(entry.event)`` shows what a reader wants to see (the README's Quickstart printed
    ``Messages(time=0, rows=1)``); ``repr`` stays one short line for lists of events."""
    import pyarrow as pa

    from eventlog.events import Messages

    batch = pa.RecordBatch.from_pylist([{"word": "spark", "count": i} for i in range(7)])
    assert str(Messages(0, batch.slice(0, 1))) == "Messages(time=0, 1 record: {'word': 'spark', 'count': 0})"
    many = str(Messages((1, 2), batch))
    assert many.startswith("Messages(time=(1, 2), 7 records: {'word': 'spark', 'count': 0}, ")
    assert many.endswith("{'word': 'spark', 'count': 4}, … 2 more)")
    assert repr(Messages(0, batch)) == "Messages(time=0, rows=7)"
