"""The stream header refuses what it cannot vouch for: a checksum since format 1.1, a typed check of every
field, CorruptLogError (never a raw JSON, base64, Arrow or Avro error) for damage, 1.0 headers still read."""

from __future__ import annotations

import base64
import glob
import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import CorruptLogError, EventLogError, StreamHeader, UnsupportedVersionError, open_log
from eventlog.header import FORMAT_VERSION, canonical_json, header_checksum
from tests.support.paths import GOLDEN_LOGS
from tests.support.strategies import schemas

GOLDEN = sorted(glob.glob(os.path.join(GOLDEN_LOGS, "*", "header.json")))
SCHEMA = pa.schema([("word", pa.string()), ("n", pa.int64()), ("xs", pa.list_(pa.int32()))])


def _doc(header: StreamHeader) -> dict:
    return json.loads(header.to_json())


def _sealed(doc: dict) -> bytes:
    doc = dict(doc)
    doc["checksum"] = header_checksum(doc)
    return json.dumps(doc).encode()


def test_writes_version_1_2_with_a_checksum_of_its_canonical_form():
    h = StreamHeader("s", 3, SCHEMA, "product:2", "avro")
    doc = _doc(h)
    assert FORMAT_VERSION == (1, 2) and doc["version"] == "1.2"
    rest = {k: v for k, v in doc.items() if k != "checksum"}
    canon = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert canonical_json(doc) == canon
    import hashlib

    assert doc["checksum"] == "sha256:" + hashlib.sha256(canon).hexdigest()
    assert StreamHeader.from_json(h.to_json()) == h
    # the form on disk does not matter, only the canonical one: re-indented and reordered it still verifies
    assert StreamHeader.from_json(json.dumps(dict(reversed(list(doc.items()))), indent=7).encode()) == h


def test_canonical_form_vector():
    """The exact bytes FORMAT.md section 2 gives as its example."""
    doc = {"peers": 2, "stream": "s", "checksum": "ignored", "fields": [{"name": "é", "nullable": True}]}
    assert canonical_json(doc) == b'{"fields":[{"name":"\\u00e9","nullable":true}],"peers":2,"stream":"s"}'


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_golden_1_0_headers_without_checksum_stay_readable(path):
    data = open(path, "rb").read()
    assert "checksum" not in json.loads(data)
    h = StreamHeader.from_json(data, path=path)
    assert h.version == (1, 0)


@pytest.mark.parametrize(
    "field,value",
    [("peers", 3), ("peers", 1), ("time", "product:3"), ("encoding", "avro"), ("stream", "t"),
     ("created", "2020-01-01T00:00:00.000Z"), ("fields", []), ("version", "1.1"), ("extra", 1)],
)
def test_any_edit_of_a_1_1_header_fails_its_checksum(field, value):
    doc = _doc(StreamHeader("s", 2, SCHEMA))
    doc[field] = value
    with pytest.raises(CorruptLogError, match="checksum") as e:
        StreamHeader.from_json(json.dumps(doc).encode(), path="/x/header.json")
    assert e.value.path == "/x/header.json"
    if field != "stream":
        assert e.value.stream == "s"


def test_checksum_required_from_1_1_and_verified_whenever_present():
    doc = _doc(StreamHeader("s", 2, SCHEMA))
    del doc["checksum"]
    with pytest.raises(CorruptLogError, match="must carry a checksum"):
        StreamHeader.from_json(json.dumps(doc).encode())
    doc["version"] = "1.0"  # a 1.0 header needs none ...
    assert StreamHeader.from_json(json.dumps(doc).encode()).version == (1, 0)
    doc["checksum"] = "sha256:" + "0" * 64  # ... but one it carries must match
    with pytest.raises(CorruptLogError, match="checksum"):
        StreamHeader.from_json(json.dumps(doc).encode())
    for bad in ("", "sha256:", "md5:" + "0" * 32, "sha256:" + "0" * 63, "sha256:" + "G" * 64, 7, [], "SHA256:" + "0" * 64):
        doc["checksum"] = bad
        with pytest.raises(CorruptLogError):
            StreamHeader.from_json(json.dumps(doc).encode())


def test_file_log_refuses_a_hand_edited_header(tmp_path):
    log = open_log(tmp_path)
    log.create_stream(StreamHeader("s", 2, SCHEMA))
    path = tmp_path / "s" / "header.json"
    doc = json.loads(path.read_text())
    doc["peers"] = 3
    path.write_text(json.dumps(doc, indent=1))
    with pytest.raises(CorruptLogError, match="checksum") as e:
        open_log(tmp_path).header("s")
    assert e.value.stream == "s" and e.value.path == str(path)
    path.write_bytes(_sealed(doc))  # an edit made on purpose is sealed with header_checksum
    assert open_log(tmp_path).header("s").peers == 3


_NOT_JSON = [b"", b"{", b"[]", b"null", b"7", b'"x"', b"\xff\xfe{}", b"{" * 100_000, b"[" * 100_000 + b"]" * 100_000,
             b'{"format": "eventlog", "format": "eventlog"}', b'{"format": NaN}']


@pytest.mark.parametrize("data", _NOT_JSON, ids=range(len(_NOT_JSON)))
def test_damaged_json_is_corrupt(data):
    with pytest.raises(CorruptLogError, match="unreadable stream header") as e:
        StreamHeader.from_json(data, path="h.json")
    assert e.value.path == "h.json"


_GOOD = {"stream": "s", "peers": 2, "time": "int64", "encoding": "arrow", "created": "2026-11-22T00:00:00.000Z"}
_BAD_VALUES = {
    "format": [None, "Eventlog", 1],
    "version": [None, 1, 1.0, "1", "1.0.0", "01.0", "1.x", " 1.0", "1.0\n", "1.1234567890", ""],
    "stream": [None, "", "bad name", "x" * 201, "-x", 5, ["s"], "s\n"],
    "peers": [None, 0, -1, "2", True, 2.0, [2], {}],
    "time": [None, "", "float", "product:0", "product:-1", "product:x", "int64 ", 64, "product:3\n"],
    "encoding": [None, "parquet", "", 1, ["arrow"]],
    "created": [None, "", "yesterday", 0, "2026-13-01T00:00:00Z", "x" * 100],
    "schema": [None, "", "!!!", "AAAA", base64.b64encode(b"\xff" * 64).decode(), 5,
               base64.b64encode(b"\xff\xff\xff\xff\x10\x00\x00\x00" + b"\x00" * 16).decode()],
    "fields": [{}, 5, "x"],
}


@pytest.mark.parametrize("field,value", [(f, v) for f, vs in _BAD_VALUES.items() for v in vs],
                         ids=lambda x: repr(x)[:30])
def test_every_field_is_type_and_range_checked(field, value):
    doc = _doc(StreamHeader("s", 2, SCHEMA))
    if value is None:
        del doc[field]
    else:
        doc[field] = value
    with pytest.raises(CorruptLogError, match="unreadable stream header") as e:
        StreamHeader.from_json(_sealed(doc), path="h.json")
    assert e.value.path == "h.json"


def test_a_newer_major_version_is_unsupported_not_corrupt():
    doc = _doc(StreamHeader("s", 2, SCHEMA))
    doc["version"] = "3.0"
    with pytest.raises(UnsupportedVersionError, match="3.0"):
        StreamHeader.from_json(_sealed(doc))
    doc["version"] = "2.0"  # Kafka logs write 2.0: parsed, appendable only by a log that writes 2.x
    h2 = StreamHeader.from_json(_sealed(doc))
    assert h2.version == (2, 0)
    h2.check_writable((2, 0))
    with pytest.raises(UnsupportedVersionError, match="2.0"):
        h2.check_writable()  # file and memory logs write 1.2
    doc["version"] = "1.2"
    with pytest.raises(UnsupportedVersionError, match="replay copy"):
        StreamHeader.from_json(_sealed(doc)).check_writable((2, 0))  # an older major: upgraded by a copy
    doc["version"] = "1.1"  # an older minor is read and appended to
    StreamHeader.from_json(_sealed(doc)).check_writable()
    doc["version"] = "1.9"  # a newer minor is read (and refused for appending)
    h = StreamHeader.from_json(_sealed(doc))
    with pytest.raises(UnsupportedVersionError):
        h.check_writable()


def test_a_dictionary_schema_stored_in_a_header_is_corrupt():
    schema = pa.schema([("d", pa.dictionary(pa.int8(), pa.string()))])
    doc = _doc(StreamHeader("s", 2, SCHEMA))
    doc["schema"] = base64.b64encode(schema.serialize().to_pybytes()).decode()
    with pytest.raises(CorruptLogError, match="dictionary"):
        StreamHeader.from_json(_sealed(doc))


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=30)
    | st.sampled_from(["int64", "product:2", "product:99", "arrow", "avro", "1.0", "1.1", "2.0", "s", "t.1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.integers(1, 70000), st.data())
def test_edited_and_resealed_headers_parse_to_a_valid_header_or_a_typed_error(schema, peers, data):
    """Whatever a field is set to (the checksum recomputed, so the field checks are what is tested), the
    parse gives a header that passes every check again, or an EventLogError."""
    try:
        h = StreamHeader("s", peers, schema)
    except EventLogError:
        assert peers > 65536
        return
    doc = _doc(h)
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(doc) + ["other"]))
        if data.draw(st.booleans()) and key in doc:
            del doc[key]
        else:
            doc[key] = data.draw(_json_values)
    try:
        got = StreamHeader.from_json(_sealed(doc))
    except EventLogError:
        return
    assert StreamHeader.from_json(got.to_json()) == got  # a valid header, every check passed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.data())
def test_damaged_header_bytes_give_the_original_or_a_typed_error(schema, data):
    raw = bytearray(StreamHeader("s", 2, schema, "product:2").to_json())
    original = StreamHeader.from_json(bytes(raw))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set" and raw:
            raw[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del raw[i : i + data.draw(st.integers(1, 40))]
        else:
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        got = StreamHeader.from_json(bytes(raw))
    except EventLogError:
        return
    assert got == original  # only whitespace-level damage can pass the checksum


def test_file_log_refuses_an_oversized_header_without_reading_it_whole(tmp_path):
    """A header.json of 64 MiB (peers and schema padded by a hostile writer) is refused with a typed error
    naming the file, after reading at most the limit + 1 bytes."""
    import pyarrow as pa

    from capture import Capture
    from eventlog import LogLimitError, open_log
    from eventlog.limits import MAX_HEADER_BYTES

    with Capture(open_log(tmp_path), "big", 0, 1, schema=pa.schema([("x", pa.int64())])) as cap:
        cap.send(0, [{"x": 1}])
    path = tmp_path / "big" / "header.json"
    with open(path, "ab") as f:
        f.write(b" " * (MAX_HEADER_BYTES + 10))
    with pytest.raises(LogLimitError) as e:
        open_log(tmp_path).header("big")
    assert e.value.path and e.value.path.endswith("header.json") and e.value.stream == "big"


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
