"""tools/s3-server --impl s3proxy: S3Proxy, the second S3-protocol server the tests run on — its lifecycle, the
client settings it needs, and what it answers that moto does not (it ignores conditional writes, which is why
the tests have it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.support.paths import TOOLS
from tests.support.ports import port_free
from tests.support.s3 import TOOL, boto3_client, candidate_ports

pytestmark = pytest.mark.s3proxy  # Java 17+, and Maven once (tests/conftest.py registers the marker)


def _run_tool(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, env=env, timeout=timeout)


def _free_port():
    return next(p for p in reversed(candidate_ports("s3proxy")) if port_free(p))  # the fixture takes the first


def _pyarrow_fs(server):
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{server.port}", scheme="http",
                             access_key=server.env["AWS_ACCESS_KEY_ID"], secret_key=server.env["AWS_SECRET_ACCESS_KEY"],
                             region=server.env["AWS_REGION"])


def _error_code(err):
    return err.response["Error"]["Code"], err.response["ResponseMetadata"]["HTTPStatusCode"]


# ---- the tool ----------------------------------------------------------------------------------------------


def test_s3proxy_starts_answers_and_stop_removes_its_data(tmp_path):
    port, data = _free_port(), tmp_path / "s3"
    args = ["--port", str(port), "--data", str(data)]
    assert _run_tool("status", *args).returncode == 3
    pid = None
    start = _run_tool("start", "--impl", "s3proxy", "--bucket", "logs", "--bucket", "more", *args)
    try:
        assert start.returncode == 0, start.stderr
        assert start.stdout.strip() == f"http://127.0.0.1:{port}"
        assert (data / "impl").read_text().strip() == "s3proxy"
        pid = int((data / "pid").read_text())
        assert b"org.gaul.s3proxy.Main" in open(f"/proc/{pid}/cmdline", "rb").read()
        status = _run_tool("status", *args)
        assert status.returncode == 0 and "(s3proxy)" in status.stderr, status.stderr

        env = dict(ln.removeprefix("export ").split("=", 1) for ln in _run_tool("env", *args).stdout.splitlines())
        assert env["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        assert env["AWS_REQUEST_CHECKSUM_CALCULATION"] == env["AWS_RESPONSE_CHECKSUM_VALIDATION"] == "when_required"
        moto_env = _run_tool("env", "--impl", "moto", *args).stdout
        assert "AWS_ENDPOINT_URL" in moto_env and "CHECKSUM" not in moto_env

        s3 = boto3_client(env)
        assert {"logs", "more"} <= {b["Name"] for b in s3.list_buckets()["Buckets"]}
        again = _run_tool("start", "--impl", "s3proxy", "--bucket", "logs", *args)  # an existing bucket is fine
        assert again.returncode == 0 and "already running" in again.stderr, again.stderr
        other = _run_tool("start", *args)  # moto asked for where S3Proxy runs
        assert other.returncode == 1
        assert len(other.stderr.strip().splitlines()) == 1 and "s3proxy already runs" in other.stderr
        log = (data / "server.log").read_text()
        assert "Started Server" in log and " DEBUG " not in log  # tools/s3/logback.xml: INFO, not every request
    finally:
        stop = _run_tool("stop", *args)
    assert stop.returncode == 0 and f"stopped (pid {pid})" in stop.stderr
    assert not data.exists()
    assert _run_tool("status", *args).returncode == 3
    assert not os.path.exists(f"/proc/{pid}/cmdline") or b"s3proxy" not in open(f"/proc/{pid}/cmdline", "rb").read()


@pytest.mark.parametrize("missing", ["mvn", "java"])
def test_s3proxy_without_maven_or_java_fails_with_one_clear_line(tmp_path, missing):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("mvn", "java"):
        if name != missing and shutil.which(name):
            os.symlink(shutil.which(name), bindir / name)
    env = {"PATH": str(bindir), "EVENTLOG_KAFKA_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    proc = _run_tool("start", "--impl", "s3proxy", "--port", str(_free_port()), env=env, timeout=120)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert ("Maven" if missing == "mvn" else "Java 17") in line and "S3Proxy" in line
    assert not (tmp_path / "cache" / "s3proxy-2.6.0" / "libs").exists()


def test_the_fetched_jars_are_cached_outside_the_repository(s3proxy_server):
    sys.path.insert(0, str(TOOLS))
    try:
        import maven_jars
    finally:
        sys.path.remove(str(TOOLS))
    vdir = maven_jars.version_dir("s3proxy", "2.6.0")
    assert os.path.exists(os.path.join(vdir, "COMPLETE"))
    assert "s3proxy-2.6.0.jar" in os.listdir(os.path.join(vdir, "libs"))
    assert "org.gaul" in open(os.path.join(vdir, "pom.xml")).read()
    assert not os.path.realpath(vdir).startswith(str(TOOLS.parent) + os.sep)


# ---- what clients see -------------------------------------------------------------------------------------


def test_the_fixture_keeps_its_settings_out_of_the_process_environment(s3proxy_server):
    assert s3proxy_server.endpoint == f"http://127.0.0.1:{s3proxy_server.port}"
    assert os.environ.get("AWS_ENDPOINT_URL") != s3proxy_server.endpoint
    assert s3proxy_server.env["AWS_REQUEST_CHECKSUM_CALCULATION"] == "when_required"


def test_boto3_puts_and_gets_with_checksums_when_required_only(s3proxy_server, monkeypatch):
    from botocore.exceptions import ClientError

    bucket = s3proxy_server.new_bucket()
    s3 = boto3_client(s3proxy_server.env)
    etag = s3.put_object(Bucket=bucket, Key="a/b.txt", Body=b"hello")["ETag"]
    assert etag == '"5d41402abc4b2a76b9719d911017c592"'  # the MD5 of the body, as S3's
    got = s3.get_object(Bucket=bucket, Key="a/b.txt")
    assert got["Body"].read() == b"hello" and got["ETag"] == etag
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="missing")
    assert _error_code(err.value) == ("NoSuchKey", 404)

    # boto3's defaults (flexible checksums on every upload) are what S3Proxy 2.6 refuses
    import boto3

    for var in ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
        monkeypatch.delenv(var, raising=False)
    default = boto3.client("s3", endpoint_url=s3proxy_server.endpoint, region_name="us-east-1",
                           aws_access_key_id="eventlog", aws_secret_access_key="eventlog-secret")
    with pytest.raises(ClientError) as err:
        default.put_object(Bucket=bucket, Key="c.txt", Body=b"x")
    assert _error_code(err.value) == ("NotImplemented", 501)


def test_pyarrow_with_the_checksum_settings_writes_and_lists_nested_keys(s3proxy_server, monkeypatch):
    import pyarrow.fs as pafs

    bucket = s3proxy_server.new_bucket()
    for var in ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
        monkeypatch.setenv(var, s3proxy_server.env[var])  # the AWS SDK reads them as the filesystem is made
    fs = _pyarrow_fs(s3proxy_server)
    for key, body in (("log/part-0/seg-1", b"one"), ("log/part-0/seg-2", b"two"), ("log/header.json", b"{}")):
        with fs.open_output_stream(f"{bucket}/{key}") as f:
            f.write(body)
    listed = {(i.path, i.type) for i in fs.get_file_info(pafs.FileSelector(bucket, recursive=True))}
    assert listed == {(f"{bucket}/log", pafs.FileType.Directory), (f"{bucket}/log/part-0", pafs.FileType.Directory),
                      (f"{bucket}/log/part-0/seg-1", pafs.FileType.File),
                      (f"{bucket}/log/part-0/seg-2", pafs.FileType.File),
                      (f"{bucket}/log/header.json", pafs.FileType.File)}
    assert fs.open_input_file(f"{bucket}/log/part-0/seg-2").read() == b"two"
    # the store holds the objects only: no directory entries, no leftovers of the uploads
    raw = boto3_client(s3proxy_server.env).list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in raw["Contents"]] == ["log/header.json", "log/part-0/seg-1", "log/part-0/seg-2"]
    page = boto3_client(s3proxy_server.env).list_objects_v2(Bucket=bucket, Prefix="log/", Delimiter="/")
    assert [o["Key"] for o in page["Contents"]] == ["log/header.json"]
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["log/part-0/"]


# ---- why the tests have it: conditional writes ------------------------------------------------------------


def test_s3proxy_ignores_conditional_writes_that_moto_enforces(s3proxy_server, s3_server):
    from botocore.exceptions import ClientError

    proxy = boto3_client(s3proxy_server.env)
    bucket = s3proxy_server.new_bucket()
    first = proxy.put_object(Bucket=bucket, Key="k", Body=b"first")["ETag"]
    proxy.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")  # answers 200 ...
    assert proxy.get_object(Bucket=bucket, Key="k")["Body"].read() == b"second"  # ... and overwrote
    proxy.put_object(Bucket=bucket, Key="k", Body=b"third", IfMatch=first)  # a stale ETag: overwrites too
    assert proxy.get_object(Bucket=bucket, Key="k")["Body"].read() == b"third"
    with pytest.raises(ClientError) as err:  # conditional reads it does honour
        proxy.get_object(Bucket=bucket, Key="k", IfMatch=first)
    assert _error_code(err.value) == ("PreconditionFailed", 412)

    moto = boto3_client(s3_server.env)
    bucket = s3_server.new_bucket()
    moto.put_object(Bucket=bucket, Key="k", Body=b"first")
    with pytest.raises(ClientError) as err:
        moto.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert _error_code(err.value) == ("PreconditionFailed", 412)
    assert moto.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"
