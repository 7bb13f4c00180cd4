"""Object stores that ignore conditional writes (issue 33 §3): writer fencing on ``s3://`` and the runtime's
one-driver fence rest on ``If-None-Match``/``If-Match``. A store that answers 200 and overwrites (s3proxy 2.6,
run here from Maven Central as a second S3 implementation besides moto) let two writers of one part both
acknowledge sequence id 1. Each bucket is probed once per process; a store that does not honour conditional
writes is refused before anything is written, unless the deployment says it needs no fence
(``EVENTLOG_S3_FENCING=off``). The same store refuses boto3's default flexible checksums: the clients send
checksums only where an operation requires them, and a failed write reads as a write."""

from __future__ import annotations

import logging
import subprocess
import sys

import boto3
import botocore.config
import pyarrow as pa
import pytest

from capture import Capture
from connectors.files import storage as st
from eventlog import ConditionalWritesError, EventLogError, open_log
from replay.dataset import read_dataset
from runtime.checkpoints.store import CheckpointStore

SCHEMA = pa.schema([("x", pa.int64())])


def _uri(server, bucket: str, path: str = "logs") -> str:
    """An ``s3://`` log URI that names ``server`` itself (pyarrow's query options), not the environment's store."""
    return (f"s3://{server.env['AWS_ACCESS_KEY_ID']}:{server.env['AWS_SECRET_ACCESS_KEY']}@{bucket}/{path}"
            f"?endpoint_override=127.0.0.1:{server.port}&scheme=http&region=us-east-1")


def _keys(server, bucket: str) -> list[str]:
    client = boto3.client(
        "s3", endpoint_url=server.endpoint, region_name="us-east-1",
        aws_access_key_id=server.env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"],
        config=botocore.config.Config(request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required"))
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))


def _write(uri: str, part: int = 0, values=(1, 2, 3)) -> None:
    with Capture(open_log(uri), "s", part, 2, schema=SCHEMA) as cap:
        cap.send(0, [{"x": v} for v in values])
        cap.advance_to(1)


@pytest.fixture(autouse=True)
def _forget_probes(monkeypatch):
    """Each test probes afresh (the probe's answer is remembered per process and bucket)."""
    monkeypatch.setattr(st, "_FENCING", {})
    monkeypatch.delenv(st.FENCING_ENV, raising=False)


def test_a_store_ignoring_conditional_writes_is_refused_before_anything_is_written(s3proxy_server):
    bucket = s3proxy_server.new_bucket()
    uri = _uri(s3proxy_server, bucket)
    with pytest.raises(ConditionalWritesError) as err:
        _write(uri)
    said = str(err.value)
    assert "ignores If-None-Match" in said and f"127.0.0.1:{s3proxy_server.port}" in said
    assert f"s3://{bucket}" in said and "EVENTLOG_S3_FENCING=off" in said
    assert _keys(s3proxy_server, bucket) == []  # not a header, not a segment, not the probe's scratch object
    # a second writer in the same process is refused from what the probe found, without probing again
    with pytest.raises(ConditionalWritesError):
        _write(uri, part=1)
    [(endpoint, probed)] = st._FENCING.items()
    assert endpoint == (f"http://127.0.0.1:{s3proxy_server.port}", bucket) and "ignores If-None-Match" in probed


def test_the_cli_says_so_in_one_line_with_the_setting_that_writes_anyway(s3proxy_server, tmp_path):
    src = tmp_path / "src"
    _write(str(src))
    bucket = s3proxy_server.new_bucket()
    proc = subprocess.run([sys.executable, "-m", "replay.cli", "copy", str(src), _uri(s3proxy_server, bucket), "s"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "ignores If-None-Match" in proc.stderr and "EVENTLOG_S3_FENCING=off" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _keys(s3proxy_server, bucket) == []


def test_fencing_off_writes_and_reads_back_on_the_same_store_and_warns_once(s3proxy_server, monkeypatch, caplog):
    """With the fence off the store is usable: the clients' checksums are ones it accepts (boto3's default
    flexible checksums were refused with NotImplemented), for puts (boto3) and reads (pyarrow)."""
    monkeypatch.setenv(st.FENCING_ENV, "off")
    monkeypatch.setattr(st, "_UNFENCED_SAID", set())
    bucket = s3proxy_server.new_bucket()
    uri = _uri(s3proxy_server, bucket)
    with caplog.at_level(logging.WARNING, logger="eventlog"):
        _write(uri, part=0, values=(1, 2, 3))
        _write(uri, part=1, values=(4,))
    warned = [r for r in caplog.records if "EVENTLOG_S3_FENCING=off" in r.getMessage()]
    assert len(warned) == 1 and bucket in warned[0].getMessage()
    read = read_dataset(uri, "s")
    assert sorted(read.dataset.to_table().column("x").to_pylist()) == [1, 2, 3, 4]
    assert open_log(uri).streams() == ["s"]
    assert not any(k.startswith(".eventlog-probe") for k in _keys(s3proxy_server, bucket))


def test_a_store_honouring_conditional_writes_is_probed_once_and_left_clean(s3_server, s3_bucket):
    bucket = s3_bucket.removeprefix("s3://")
    _write(f"{s3_bucket}/logs", part=0)
    _write(f"{s3_bucket}/logs", part=1)
    assert list(st._FENCING.values()) == [None]
    assert not any(".eventlog-probe" in k for k in _keys(s3_server, bucket))


def test_the_runtime_refuses_checkpoints_on_a_store_without_conditional_writes(s3proxy_server, monkeypatch):
    """The one-driver fence of the runtime (a conditional write of the job's counters) is refused there too."""
    for key, value in s3proxy_server.env.items():
        monkeypatch.setenv(key, value)
    bucket = s3proxy_server.new_bucket()
    store = CheckpointStore(f"s3://{bucket}/ck", "job")
    with pytest.raises(ConditionalWritesError, match="ignores If-None-Match"):
        store.next_generation()
    assert _keys(s3proxy_server, bucket) == []


def test_a_failed_put_reads_as_a_write_naming_the_object(s3proxy_server, monkeypatch):
    monkeypatch.setenv(st.FENCING_ENV, "off")
    uri = _uri(s3proxy_server, "no-such-bucket-here")
    with pytest.raises(EventLogError) as err:
        _write(uri)
    said = str(err.value)
    assert said.startswith("cannot write the log's files") and "no-such-bucket-here/logs/s" in said
    assert "no-such-bucket-here' not found" in said or "NoSuchBucket" in said
