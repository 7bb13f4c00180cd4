"""The JVM tap on S3 (moto's S3 server, ``tests.support.s3``): what it writes into an ``s3://`` log is what the Python
tap writes there (the same objects, the same events part by part), staged on the executor and published by
conditional puts, with the same guarantees (retried tasks, a lost publish race, a second evaluation), its
micro-batches appended as the Python writer's; and its requests are signed as AWS Signature Version 4 says
(checked against botocore's signer on a recording server).

Skipped only where no JDK (``javac``) is installed."""

from __future__ import annotations

import http.server
import threading
from collections import Counter

import pyarrow.fs as pafs
import pytest

from capture import tap, tap_batches
from connectors.spark import jvm as jvm_mod
from connectors.spark.jvm import jvm_tap
from connectors.spark.uri import STAGING_DIR
from eventlog import Messages, open_log

from .conftest import object_keys, workers_env
from .test_jvm_tap import _fail_first_attempt, captured, verify, words

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", autouse=True)
def _workers_reach_s3(spark, s3_server):
    """The session's Python workers get the S3 server's settings (the race test's UDF writes there, the data source
    reads there)."""
    with workers_env(spark, s3_server.env):
        yield


def events(log_uri: str, stream: str) -> list[list[tuple]]:
    """Per part, its events without their timestamps: ``("M", time, sorted rows)`` or ``("P", updates)``."""
    log = open_log(log_uri)
    out = []
    for p in range(log.header(stream).peers):
        with log.reader(stream, p) as r:
            out.append([("M", e.event.time, sorted(map(repr, e.event.records.to_pylist())))
                        if isinstance(e.event, Messages) else ("P", sorted(e.event.updates)) for e in r])
    return out


@pytest.mark.parametrize("time", [None, 5, "t"], ids=["default", "literal", "column"])
def test_jvm_tap_on_s3_writes_what_the_python_tap_writes(spark, jvm, s3_bucket, time):
    df = words(spark, 5000, 3)
    jvm_log, py_log = f"{s3_bucket}/jvm", f"{s3_bucket}/py"
    assert sorted(jvm_tap(df, jvm_log, "words", time=time).collect()) == sorted(df.collect())
    tap(df, py_log, "words", time=time, engine="python").collect()
    assert events(jvm_log, "words") == events(py_log, "words")
    assert captured(jvm_log, "words") == captured(py_log, "words")   # check_part passes on every part
    assert object_keys(jvm_log) == object_keys(py_log)                         # the same objects: no staging, no lock
    assert not [k for k in object_keys(jvm_log) if STAGING_DIR in k or k.endswith(".lock")]
    verify(jvm_log)


def test_a_log_given_by_its_uri_query_and_many_segments(spark, jvm, s3_server, s3_bucket, monkeypatch):
    """The endpoint in the URI's query (not in the environment); small segments, each published with its index,
    in sequence order."""
    monkeypatch.setattr(jvm_mod, "SEGMENT_BYTES", 20_000)
    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 200)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    log = f"{s3_bucket}/q?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http"
    df = words(spark, 20000, 4)   # parts publishing while others finish: no attempt removes another's staging
    assert jvm_tap(df, log, "words", time="t").count() == 20000
    got = captured(log, "words")
    assert sum(sum(c.values()) for c in got.values()) == 20000
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    keys = object_keys(f"{s3_bucket}/q/words/part=0")
    segments = [k for k in keys if k.endswith(".arrow")]
    assert len(segments) >= 3
    assert sorted(k for k in keys if k.endswith(".index")) == ["_" + s[:20] + ".index" for s in segments]
    verify(f"{s3_bucket}/q")


def test_retried_tasks_publish_each_part_once(spark, jvm, s3_bucket, monkeypatch):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 50)  # the failing attempts have staged events already
    fail = F.udf(_fail_first_attempt, LongType())
    df = spark.range(0, 3000, 1, 3).select(fail("id").alias("id"), (F.col("id") % 4).alias("t"))
    log = f"{s3_bucket}/retry"
    assert sorted(r.id for r in jvm_tap(df, log, "jvm", time="t").collect()) == list(range(3000))
    got = captured(log, "jvm")
    assert sum(sum(c.values()) for c in got.values()) == 3000
    assert all(n == 1 for c in got.values() for n in c.values())
    verify(log)


def _take_part_one_first(bucket: str):
    """A UDF that, in partition 1, puts an object at part 1's first segment before the attempt publishes (as a
    speculative attempt winning the race would)."""
    def take(x):
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1 and x % 100 == 50:
            import boto3

            boto3.client("s3").put_object(Bucket=bucket, Key="race/words/part=1/00000000000000000001.arrow",
                                          Body=b"the other attempt's segment")
        return x
    return take


def test_an_attempt_that_loses_the_publish_race_keeps_nothing(spark, jvm, s3_bucket):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    bucket = s3_bucket[len("s3://"):]
    take = F.udf(_take_part_one_first(bucket), LongType())
    df = spark.range(0, 300, 1, 3).select(take("id").alias("id"), (F.col("id") % 4).alias("t"))
    log = f"{s3_bucket}/race"
    assert jvm_tap(df, log, "words", time="t").count() == 300
    assert object_keys(f"{log}/words/part=1") == ["00000000000000000001.arrow"]   # the winner's, alone
    fs, path = pafs.FileSystem.from_uri(f"{log}/words/part=1/00000000000000000001.arrow")
    with fs.open_input_file(path) as f:
        assert f.read() == b"the other attempt's segment"
    stats = open_log(log)
    assert [stats.part_stats("words", p).next_seq > 1 for p in (0, 2)] == [True, True]


def test_second_evaluation_and_partial_reads_publish_nothing_more(spark, jvm, s3_bucket):
    log = f"{s3_bucket}/again"
    tapped = jvm_tap(words(spark, 300, 3), log, "words", time="t")
    assert len(tapped.take(2)) == 2  # part of one partition: discarded, not published
    assert tapped.count() == 300
    first = object_keys(log)
    assert tapped.count() == 300  # the parts exist: nothing is captured twice
    assert object_keys(log) == first
    assert spark.read.format("eventlog").load(f"{log}/words").count() == 300
    verify(log)


def test_micro_batches_on_s3_are_appended_as_the_python_writer_appends_them(spark, jvm, s3_bucket):
    jvm_log, py_log = f"{s3_bucket}/mb-jvm", f"{s3_bucket}/mb-py"
    for batch_id in range(3):
        df = words(spark, 1000 * (batch_id + 1), 2)
        tap_batches(jvm_log, "words", engine="jvm")(df, batch_id)
        tap_batches(py_log, "words", engine="python")(df, batch_id)
    tap_batches(jvm_log, "words", engine="jvm")(words(spark, 1000, 2), 1)   # a re-executed batch: written once
    got, want = events(jvm_log, "words"), events(py_log, "words")
    assert got == want
    assert sum(len(e[2]) for part in got for e in part if e[0] == "M") == 6000
    assert not [k for k in object_keys(jvm_log) if STAGING_DIR in k]
    verify(jvm_log)


# -- the requests themselves: AWS Signature Version 4, as botocore signs and S3 checks ------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    requests: list = []
    status = 200
    statuses: list = []  # the statuses of the next answers, before ``status`` again
    answer = b""
    headers: dict = {}

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        type(self).requests.append((self.command, self.path, dict(self.headers), body))
        self.send_response(type(self).statuses.pop(0) if type(self).statuses else type(self).status)
        self.send_header("Content-Length", str(len(type(self).answer)))
        for name, value in type(self).headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(type(self).answer)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading at its bound

    do_PUT = do_HEAD = do_GET = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorder():
    _Recorder.requests = []
    _Recorder.status = 200
    _Recorder.statuses = []
    _Recorder.answer = b""
    _Recorder.headers = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


def _check_signature(method, path, headers, secret, region):
    """Recompute the request's signature as S3 (and moto) do, with botocore's signer."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    auth = headers["Authorization"]
    access = auth.split("Credential=")[1].split("/")[0]
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    lower = {k.lower(): v for k, v in headers.items()}
    request = AWSRequest(method=method, url=f"http://{lower['host']}{path}",
                         headers={k: lower[k] for k in signed})
    request.context["timestamp"] = lower["x-amz-date"]
    signer = S3SigV4Auth(Credentials(access, secret, lower.get("x-amz-security-token")), "s3", region)
    canonical = signer.canonical_request(request)
    want = signer.signature(signer.string_to_sign(request, canonical), request)
    assert auth.split("Signature=")[1] == want, canonical


@pytest.mark.parametrize("token,prefix", [("", ""), ("a-session-token/+=", ""), ("", "/proxied/s3")])
def test_requests_are_signed_as_aws_signature_version_4(spark, jvm, recorder, tmp_path, token, prefix):
    sc = spark.sparkContext
    port = recorder.server_address[1]
    store = sc._jvm.eventlog.spark.JvmTap.objectStore(
        f"http://127.0.0.1:{port}{prefix}", "eu-west-3", "my-bucket", "AKIDEXAMPLE", "wJalr/XUtnFEMI+K7MDENG", token)
    body = tmp_path / "seg"
    body.write_bytes(b"x" * 100_000)
    key = "logs/st ream/part=0/ünï+code/00000000000000000001.arrow"
    assert sc._jvm.eventlog.spark.JvmTap.put(store, key, str(body), True)
    assert sc._jvm.eventlog.spark.JvmTap.exists(store, key)
    (put, path, headers, data), (head, head_path, head_headers, _) = _Recorder.requests
    assert (put, head) == ("PUT", "HEAD")
    assert data == body.read_bytes()
    assert path == head_path == \
        prefix + "/my-bucket/logs/st%20ream/part%3D0/%C3%BCn%C3%AF%2Bcode/00000000000000000001.arrow"
    assert headers["If-None-Match"] == "*"
    import hashlib

    assert headers["x-amz-content-sha256"] == hashlib.sha256(data).hexdigest()
    assert headers.get("x-amz-security-token", "") == token
    _check_signature(put, path, headers, "wJalr/XUtnFEMI+K7MDENG", "eu-west-3")
    _check_signature(head, head_path, head_headers, "wJalr/XUtnFEMI+K7MDENG", "eu-west-3")


@pytest.mark.parametrize("token,bucket", [("", "my-bucket"), ("a-session-token/+=", "my-bucket"), ("", "my.bucket")])
def test_aws_itself_is_addressed_by_virtual_host_and_signed_for_it(spark, jvm, token, bucket):
    """Without an endpoint the store is AWS S3: requests go over HTTPS to ``<bucket>.s3.<region>.amazonaws.com``
    with the key as the path (a bucket with dots, which AWS's certificate does not cover as a host, path-style to
    ``s3.<region>.amazonaws.com``). There is no network here, so each request is built and signed but not sent, and
    botocore's signer (what S3 checks signatures with) recomputes the signature for that host and path: an object
    put (exclusive), a head, and a bucket listing with its query."""
    from urllib.parse import urlsplit

    from connectors.spark.jvm import _java_strings

    j = spark.sparkContext._jvm.eventlog.spark.JvmTap
    secret = "wJalr/XUtnFEMI+K7MDENG"
    store = j.objectStore("", "eu-west-3", bucket, "AKIDEXAMPLE", secret, token)
    host, root = (f"{bucket}.s3.eu-west-3.amazonaws.com", "") if "." not in bucket else \
        ("s3.eu-west-3.amazonaws.com", f"/{bucket}")
    key = "logs/st ream/part=0/ünï+code/00000000000000000001.arrow"
    key_path = "/logs/st%20ream/part%3D0/%C3%BCn%C3%AF%2Bcode/00000000000000000001.arrow"
    listing = ("list-type", "2", "prefix", "logs/st ream/", "delimiter", "/")
    for method, k, query, exclusive, path in [("PUT", key, (), True, root + key_path),
                                              ("HEAD", key, (), False, root + key_path),
                                              ("GET", None, listing, False, root or "/")]:
        uri, *lines = j.unsentRequest(store, method, k, _java_strings(spark, query), exclusive)
        parts = urlsplit(uri)
        assert (parts.scheme, parts.netloc, parts.path) == ("https", host, path)
        assert parts.query == ("delimiter=%2F&list-type=2&prefix=logs%2Fst%20ream%2F" if query else "")
        headers = dict(line.split(": ", 1) for line in lines)
        assert (headers.get("If-None-Match") == "*") == exclusive
        assert headers.get("x-amz-security-token", "") == token
        headers["host"] = parts.netloc
        _check_signature(method, path + (f"?{parts.query}" if parts.query else ""), headers, secret, "eu-west-3")


def _recorded_store(spark, recorder, tmp_path, region: str = "", key: str = "", secret: str = ""):  # noqa: ANN001, ANN202
    """The JVM tap's class, a store of bucket ``b`` at the recording server, and a one-byte file to put."""
    j = spark.sparkContext._jvm.eventlog.spark.JvmTap
    store = j.objectStore(f"http://127.0.0.1:{recorder.server_address[1]}", region, "b", key, secret, "")
    body = tmp_path / "seg"
    body.write_bytes(b"y")
    return j, store, body


def test_store_answers_are_typed(spark, jvm, recorder, tmp_path):
    """412 on an exclusive put: False; 404 on a head: False; a refusal: an error naming the object and the
    status; a 5xx: retried, then the same; anonymous access: no signature."""
    from py4j.protocol import Py4JJavaError

    j, store, body = _recorded_store(spark, recorder, tmp_path)
    _Recorder.status = 412
    assert j.put(store, "k/1", str(body), True) is False
    assert "Authorization" not in _Recorder.requests[-1][2]
    _Recorder.status = 404
    assert j.exists(store, "k/1") is False
    _Recorder.status = 403
    with pytest.raises(Py4JJavaError, match=r"PutObject of s3://b/k/1 refused: HTTP 403"):
        j.put(store, "k/1", str(body), False)
    _Recorder.status = 503
    _Recorder.requests = []
    with pytest.raises(Py4JJavaError, match=r"HeadObject of s3://b/k/2 refused: HTTP 503"):
        j.exists(store, "k/2")
    assert len(_Recorder.requests) == 5   # retried with back-off
    assert Counter(r[0] for r in _Recorder.requests) == Counter({"HEAD": 5})


_REDIRECT = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>PermanentRedirect</Code><Message>The bucket "
             b"you are attempting to access must be addressed using the specified endpoint.</Message><Endpoint>"
             b"b.s3.eu-west-1.amazonaws.com</Endpoint><Bucket>b</Bucket></Error>")
_WRONG_REGION = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AuthorizationHeaderMalformed</Code><Message>"
                 b"The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'eu-west-1'"
                 b"</Message><Region>eu-west-1</Region></Error>")


def test_a_bucket_in_another_region_is_named_with_the_region_to_sign_for(spark, jvm, recorder, tmp_path):
    """AWS's answers when requests are signed for the wrong region — a head's bare 301 with
    x-amz-bucket-region, a PermanentRedirect document, an AuthorizationHeaderMalformed naming the region — give
    an error naming the object, AWS's code and the region to set; nothing is said of a region that is the one
    signed for, nor repeated when it is no region name."""
    from py4j.protocol import Py4JJavaError

    j, store, body = _recorded_store(spark, recorder, tmp_path, "us-east-1", "AKIDEXAMPLE", "secret")
    hint = r"the bucket b is in region eu-west-1, these requests are signed for us-east-1: set AWS_REGION=eu-west-1"

    _Recorder.status, _Recorder.answer, _Recorder.headers = 301, b"", {"x-amz-bucket-region": "eu-west-1"}
    with pytest.raises(Py4JJavaError, match=r"HeadObject of s3://b/k/1 refused: HTTP 301; " + hint):
        j.exists(store, "k/1")
    _Recorder.answer = _REDIRECT
    with pytest.raises(Py4JJavaError, match=r"GetObject of s3://b/k/1 refused: HTTP 301 PermanentRedirect \(The "
                                            r"bucket .*\); " + hint):
        j.get(store, "k/1", 1 << 20)
    with pytest.raises(Py4JJavaError, match=r"ListObjectsV2 of s3://b/k/ refused: HTTP 301 PermanentRedirect.*; "
                                            + hint):
        j.list(store, "k")
    _Recorder.status, _Recorder.answer, _Recorder.headers = 400, _WRONG_REGION, {}
    with pytest.raises(Py4JJavaError, match=r"PutObject of s3://b/k/1 refused: HTTP 400 AuthorizationHeaderMalformed"
                                            r" .*; " + hint):
        j.put(store, "k/1", str(body), True)
    assert len(_Recorder.requests) == 4  # refusals, not retried
    # the region signed for, or no region name: the store's own words only
    _Recorder.status, _Recorder.answer, _Recorder.headers = 403, b"", {"x-amz-bucket-region": "us-east-1"}
    with pytest.raises(Py4JJavaError) as e:
        j.exists(store, "k/1")
    assert "refused: HTTP 403" in str(e.value) and "AWS_REGION" not in str(e.value)
    _Recorder.headers = {"x-amz-bucket-region": "eu-west-1; rm -rf"}
    with pytest.raises(Py4JJavaError) as e:
        j.exists(store, "k/1")
    assert "refused: HTTP 403" in str(e.value) and "rm -rf" not in str(e.value)


def test_an_unreachable_store_fails_the_job_naming_the_object(spark, jvm, s3_bucket, monkeypatch):
    """The driver reached the store (the stream is created), the tasks cannot: the job fails with an error
    naming the store and the object, and leaves no part."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    df = words(spark, 100, 2)
    real = jvm_mod._where

    def dead_endpoint(target, log, stream):
        root, store = real(target, log, stream)
        return root, (f"http://127.0.0.1:{dead}", *store[1:])

    monkeypatch.setattr(jvm_mod, "_where", dead_endpoint)
    tapped = jvm_tap(df, f"{s3_bucket}/dead", "words")
    with pytest.raises(Exception, match=rf"S3 store http://127.0.0.1:{dead} did not answer for s3://.*/dead/words/"):
        tapped.count()
    assert [k for k in object_keys(f"{s3_bucket}/dead") if "part=" in k] == []
    log = open_log(f"{s3_bucket}/dead")
    assert [log.part_stats("words", p).next_seq for p in range(2)] == [1, 1]   # created, nothing published


# -- the JVM reader on S3 ----------------------------------------------------------------------------------


def test_jvm_reader_on_s3_gives_the_python_readers_rows(spark, jvm, s3_bucket, monkeypatch):
    from connectors.spark.jvm.read import read_log

    monkeypatch.setattr(jvm_mod, "SEGMENT_BYTES", 30_000)   # several segments a part
    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 300)
    log = f"{s3_bucket}/read"
    jvm_tap(words(spark, 9000, 3), log, "words", time="t").count()
    for workers in (None, 2, 5):
        opts = {} if workers is None else {"workers": workers}
        got = read_log(spark, f"{log}/words", engine="jvm", **opts)
        want = read_log(spark, f"{log}/words", engine="python", **opts)
        assert got.schema == want.schema
        assert got.rdd.getNumPartitions() == want.rdd.getNumPartitions()
        rows = sorted(map(tuple, got.collect()))
        assert rows == sorted(map(tuple, want.collect())) and len(rows) == 9000


def test_jvm_reader_on_s3_reads_around_a_missing_index_and_names_a_damaged_object(spark, jvm, s3_bucket):
    import boto3
    from py4j.protocol import Py4JJavaError

    from connectors.spark.jvm.read import read_log

    log = f"{s3_bucket}/damaged"
    jvm_tap(words(spark, 3000, 2), log, "words", time="t").count()
    bucket = s3_bucket[len("s3://"):]
    s3 = boto3.client("s3")
    s3.delete_object(Bucket=bucket, Key="damaged/words/part=0/_00000000000000000001.index")
    assert read_log(spark, f"{log}/words", engine="jvm").count() == 3000
    key = "damaged/words/part=1/00000000000000000001.arrow"
    data = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF   # a byte inside an event's body
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    with pytest.raises(Py4JJavaError) as e:
        read_log(spark, f"{log}/words", engine="jvm").collect()
    said = str(e.value)
    assert "CorruptLogError" in said and f"s3://{bucket}/{key}" in said and "part 1" in said, said[-3000:]


def test_listing_pages_through_every_object_and_only_direct_children(spark, jvm, s3_server, s3_bucket):
    import boto3

    bucket = s3_bucket[len("s3://"):]
    s3 = boto3.client("s3")
    names = [f"{i:05d}.arrow" for i in range(1203)]   # over the 1000 keys of one listing page
    for n in names:
        s3.put_object(Bucket=bucket, Key=f"p/part=0/{n}", Body=b"")
    s3.put_object(Bucket=bucket, Key="p/part=0/deeper/x.arrow", Body=b"")
    s3.put_object(Bucket=bucket, Key="p/part=01/y.arrow", Body=b"")
    env = s3_server.env
    j = spark.sparkContext._jvm.eventlog.spark.JvmTap
    store = j.objectStore(env["AWS_ENDPOINT_URL"], env["AWS_REGION"], bucket, env["AWS_ACCESS_KEY_ID"],
                          env["AWS_SECRET_ACCESS_KEY"], "")
    assert list(j.list(store, "p/part=0")) == names
    assert list(j.list(store, "p/none")) == []


def test_answers_are_read_within_bounds(spark, jvm, recorder, tmp_path):
    """An answer larger than what the request can need is refused before it is held: an object over the reader's
    limit (by its Content-Length), an error document over 1 MiB."""
    from py4j.protocol import Py4JJavaError

    j = spark.sparkContext._jvm.eventlog.spark.JvmTap
    store = j.objectStore(f"http://127.0.0.1:{recorder.server_address[1]}", "", "b", "", "", "")
    _Recorder.answer = b"z" * 5000
    assert bytes(j.get(store, "k/ok", 5000)) == _Recorder.answer
    with pytest.raises(Py4JJavaError, match=r"s3://b/k/big is 5000 bytes, over the 4999 bytes it may have"):
        j.get(store, "k/big", 4999)
    _Recorder.status = 400
    _Recorder.answer = b"<Error>" + b"x" * (2 << 20) + b"</Error>"
    body = tmp_path / "seg"
    body.write_bytes(b"y")
    with pytest.raises(Py4JJavaError, match=r"answer for s3://b/k/1 \(HTTP 400\) is over 1048576 bytes"):
        j.put(store, "k/1", str(body), False)
    _Recorder.status = 404
    _Recorder.answer = b""
    assert j.get(store, "k/none", 10) is None


def test_gets_are_retried_after_a_busy_store_and_refused_naming_the_object_after_the_last_try(spark, jvm, recorder):
    """A GET answered 503 or 500 is sent again (with back-off) and the object of the answer that follows is
    returned; five refusals in a row are an error naming the object and the status."""
    from py4j.protocol import Py4JJavaError

    j = spark.sparkContext._jvm.eventlog.spark.JvmTap
    store = j.objectStore(f"http://127.0.0.1:{recorder.server_address[1]}", "", "b", "", "", "")
    _Recorder.answer = b"segment bytes"
    _Recorder.statuses = [503, 500]
    assert bytes(j.get(store, "k/seg", 100)) == b"segment bytes"
    assert [r[0] for r in _Recorder.requests] == ["GET"] * 3
    _Recorder.requests = []
    _Recorder.status = 503
    with pytest.raises(Py4JJavaError, match=r"GetObject of s3://b/k/seg refused: HTTP 503"):
        j.get(store, "k/seg", 100)
    assert len(_Recorder.requests) == 5
