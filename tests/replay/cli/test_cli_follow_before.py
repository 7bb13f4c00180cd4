"""``replay tail -f`` started before the log or the stream exists (issue 35 §2), as a user types it: the follower
is a process of its own, says once on stderr that it waits, and prints the records once a writer creates the stream
and writes them; ``--wait-timeout`` gives up with exit 3; Ctrl-C while waiting exits 130. Without ``-f`` a missing
log or stream stays an error at once.

Every wait here is for a behaviour (a line on stdout or stderr, the process's exit) with a generous deadline; none
asserts how long anything took."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Callable

import pytest

from capture import Capture
from eventlog import open_log
from tests.support.cli import MODULE, SCHEMA, capture_numbers, replay_cli
from tests.support.paths import ROOT

DEADLINE = 120.0
"""Seconds a test waits for what it expects before it fails (a CLI process starts in a few seconds)."""
WAITING = "waiting for stream 'numbers' in "


def cli_env() -> dict[str, str]:
    """The environment of a CLI process, taken now (the S3 fixture puts its client settings into os.environ)."""
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


class Follower:
    """``replay ARGS…`` as a process: its stdout and stderr lines collected by threads as they come."""

    def __init__(self, *args: object) -> None:
        self.proc = subprocess.Popen([*MODULE, *map(str, args)], cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._news: queue.Queue[None] = queue.Queue()
        self._threads = [threading.Thread(target=self._pump, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._threads:
            t.start()

    def _pump(self, stream, lines: list[str]) -> None:  # noqa: ANN001 - a text pipe
        for line in stream:
            lines.append(line.rstrip("\n"))
            self._news.put(None)
        self._news.put(None)

    def wait_for(self, what: str, ok: Callable[[], bool]) -> None:
        """Wait until ``ok()`` (checked as lines arrive); fail saying ``what`` was awaited and what came instead."""
        deadline = time.monotonic() + DEADLINE
        while not ok():
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"no {what} within {DEADLINE} s\nstdout: {self.out}\nstderr: {self.err}")
            try:
                self._news.get(timeout=0.5)
            except queue.Empty:
                pass

    def rows(self) -> list[dict]:
        return [json.loads(line) for line in list(self.out) if line.strip()]

    def records(self) -> list[int]:
        return sorted(r["record"]["n"] for r in self.rows() if r["kind"] == "messages")

    def waiting_lines(self) -> list[str]:
        return [line for line in list(self.err) if line.startswith("waiting for stream")]

    def exit_code(self) -> int:
        try:
            code = self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"the follower did not exit within {DEADLINE} s\nstdout: {self.out}\nstderr: {self.err}")
        for t in self._threads:
            t.join(timeout=10)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def followers():
    """Followers started by a test; any still running at its end is killed."""
    started: list[Follower] = []
    yield lambda *args: started.append(Follower(*args)) or started[-1]
    for f in started:
        f.stop()


def write_numbers(uri: str, peers: int = 2, times: int = 3) -> list[int]:
    """Create stream ``numbers`` and write ``times`` times of two records per part, finishing every part; the
    records' ``n``, sorted."""
    log = open_log(uri)
    caps = [Capture(log, "numbers", w, peers, schema=SCHEMA) for w in range(peers)]
    sent = []
    for t in range(times):
        for w, cap in enumerate(caps):
            batch = [{"n": 100 * t + 10 * w + i, "word": f"w{t}"} for i in range(2)]
            cap.send(t, batch)
            cap.advance_to(t + 1)
            sent += [r["n"] for r in batch]
    for cap in caps:
        cap.close()
    return sorted(sent)


# -- the log does not exist yet -------------------------------------------------------------------------------------


def test_tail_f_waits_for_a_log_that_does_not_exist_yet_then_follows_it(tmp_path, followers):
    log = tmp_path / "job" / "log"  # not even its parent exists
    f = followers("tail", "-f", log, "numbers", "-n", "1", "--interval", "0.05")
    f.wait_for("waiting line on stderr", lambda: bool(f.waiting_lines()))
    assert f.waiting_lines() == [f"waiting for stream 'numbers' in {log} to be created (Ctrl-C to stop)"]
    assert f.proc.poll() is None and f.out == []  # still waiting, nothing printed
    sent = write_numbers(str(log))  # the job starts: creates the log and the stream, writes, finishes
    f.wait_for("every record on stdout", lambda: f.records() == sent)  # from the stream's first event: -n 1 is moot
    assert f.exit_code() == 0  # every part finished: following ends
    assert len(f.waiting_lines()) == 1 and not [line for line in f.err if "error" in line]


def test_records_show_while_the_writer_is_still_writing(tmp_path, followers):
    log = tmp_path / "log"
    f = followers("tail", "-f", log, "numbers", "--interval", "0.05", "--kind", "messages")
    f.wait_for("waiting line", lambda: bool(f.waiting_lines()))
    cap = Capture(open_log(str(log)), "numbers", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 7, "word": "seven"}])
    cap.advance_to(1)  # time 0 complete: committed readers see the record
    f.wait_for("the first record", lambda: f.records() == [7])
    assert f.proc.poll() is None  # the part is not finished: still following
    cap.send(1, [{"n": 8, "word": "eight"}])
    cap.close()
    f.wait_for("the second record", lambda: f.records() == [7, 8])
    assert f.exit_code() == 0


def test_wait_timeout_on_a_log_that_never_appears_is_one_line_and_exit_3(tmp_path):
    log = tmp_path / "never"
    r = subprocess.run([*MODULE, "tail", "-f", str(log), "numbers", "--wait-timeout", "1"], cwd=ROOT, env=cli_env(),
                       capture_output=True, text=True, timeout=DEADLINE)
    assert r.returncode == 3, r.stderr
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"waiting for stream 'numbers' in {log} to be created (up to 1 s, --wait-timeout; Ctrl-C to stop)",
        f"replay: error: no stream 'numbers' in log {log} after waiting 1 s (--wait-timeout)",
    ]
    assert not log.exists()  # a follower creates nothing


def test_ctrl_c_while_waiting_exits_130(tmp_path, followers):
    f = followers("tail", "-f", tmp_path / "log", "numbers")
    f.wait_for("waiting line", lambda: bool(f.waiting_lines()))
    f.proc.send_signal(signal.SIGINT)
    assert f.exit_code() == 130
    assert f.err[-1] == "replay: interrupted" and f.out == []


# -- the log exists, the stream does not yet --------------------------------------------------------------------------


def test_tail_f_waits_for_a_stream_that_appears_later_in_an_existing_log(tmp_path, followers):
    log = str(tmp_path / "log")
    capture_numbers(log, stream="other", peers=1, times=1)
    f = followers("tail", "-f", log, "numbers", "--interval", "0.05")
    f.wait_for("waiting line", lambda: bool(f.waiting_lines()))
    assert f.waiting_lines() == [f"waiting for stream 'numbers' in {log} to be created (Ctrl-C to stop)"]
    sent = write_numbers(log)
    f.wait_for("every record", lambda: f.records() == sent)
    assert f.exit_code() == 0 and len(f.waiting_lines()) == 1


def test_wait_timeout_on_a_stream_that_never_appears(tmp_path):
    log = str(tmp_path / "log")
    capture_numbers(log, stream="other", peers=1, times=1)
    r = replay_cli("tail", "-f", log, "numbers", "--wait-timeout", "0.2", expect=3)
    assert r.stderr.splitlines()[-1] == f"replay: error: no stream 'numbers' in log {log} after waiting 0.2 s (--wait-timeout)"


def test_the_waiting_line_names_a_stream_the_name_may_be_a_typo_of(tmp_path):
    log = str(tmp_path / "log")
    capture_numbers(log, peers=1, times=1)
    r = replay_cli("tail", "-f", log, "nubmers", "--wait-timeout", "0.2", expect=3)
    assert r.stderr.splitlines()[0] == (f"waiting for stream 'nubmers' in {log} to be created (did you mean 'numbers'? "
                                        "up to 0.2 s, --wait-timeout; Ctrl-C to stop)")


def test_a_folder_without_streams_yet_is_waited_on(tmp_path, followers):
    log = tmp_path / "log"
    (log / "numbers").mkdir(parents=True)  # a stream folder a job is creating: no header yet
    f = followers("tail", "-f", log, "numbers", "--interval", "0.05")
    f.wait_for("waiting line", lambda: bool(f.waiting_lines()))
    sent = write_numbers(str(log), peers=1, times=2)
    f.wait_for("every record", lambda: f.records() == sent)
    assert f.exit_code() == 0


# -- without -f, and what is wrong at once ---------------------------------------------------------------------------


def test_without_follow_a_missing_log_or_stream_is_an_error_at_once(tmp_path):
    r = replay_cli("tail", tmp_path / "nothing", "numbers", expect=3)
    assert "no log at" in r.stderr and "waiting for" not in r.stderr
    capture_numbers(str(tmp_path / "log"), stream="other", peers=1, times=1)
    r = replay_cli("tail", tmp_path / "log", "numbers", expect=3)
    assert "stream not found" in r.stderr and "waiting for" not in r.stderr
    r = replay_cli("tail", tmp_path / "log", "numbers", "--wait-timeout", "5", expect=2)
    assert "--wait-timeout" in r.stderr and "-f" in r.stderr
    r = replay_cli("tail", "-f", tmp_path / "nothing", "numbers", "--wait-timeout", "0", expect=3)  # 0: no wait
    assert "no log at" in r.stderr and "waiting for" not in r.stderr
    r = replay_cli("cat", tmp_path / "log", "numbers", expect=3)  # cat has no follow mode: never waits
    assert "stream not found" in r.stderr


def test_what_waiting_cannot_fix_is_an_error_at_once_with_follow(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=1, times=1)
    (tmp_path / "file").write_text("x")
    r = replay_cli("tail", "-f", tmp_path / "file", "numbers", expect=2)  # a file is no log
    assert "regular file" in r.stderr and "waiting for" not in r.stderr
    r = replay_cli("tail", "-f", tmp_path / "log" / "numbers", "numbers", expect=2)  # a stream's folder
    assert "folder of stream" in r.stderr and "waiting for" not in r.stderr
    r = replay_cli("tail", "-f", tmp_path / "log", "no such", expect=2)  # an invalid stream name
    assert "invalid stream name" in r.stderr and "waiting for" not in r.stderr


def test_an_existing_stream_is_followed_as_before(tmp_path):
    log = str(tmp_path / "log")
    capture_numbers(log, peers=2, times=3)
    r = replay_cli("tail", "-f", log, "numbers", "-n", "2", "--interval", "0.01")
    assert "waiting for" not in r.stderr
    assert r.stdout == replay_cli("tail", log, "numbers", "-n", "2").stdout  # the last 2 events of each part, not all
    assert len(r.stdout.splitlines()) < len(replay_cli("cat", log, "numbers").stdout.splitlines())


# -- S3 and Kafka ----------------------------------------------------------------------------------------------------


def test_tail_f_waits_for_a_stream_on_s3(s3_bucket, followers):
    log = f"{s3_bucket}/job"
    f = followers("tail", "-f", log, "numbers", "--interval", "0.05")
    f.wait_for("waiting line", lambda: bool(f.waiting_lines()))
    assert f.waiting_lines()[0].startswith(WAITING)
    sent = write_numbers(log, peers=1, times=2)
    f.wait_for("every record", lambda: f.records() == sent)
    assert f.exit_code() == 0


@pytest.mark.kafka
def test_tail_f_waits_for_a_kafka_topic_that_does_not_exist_yet(kafka_uri, followers):
    f = followers("tail", "-f", kafka_uri, "numbers", "--interval", "0.05")
    f.wait_for("waiting line", lambda: bool(f.waiting_lines()))
    assert f.waiting_lines() == [f"waiting for stream 'numbers' in {kafka_uri} to be created (Ctrl-C to stop)"]
    assert f.proc.poll() is None
    sent = write_numbers(kafka_uri)
    f.wait_for("every record", lambda: f.records() == sent)
    assert f.exit_code() == 0 and len(f.waiting_lines()) == 1


@pytest.mark.kafka
def test_wait_timeout_on_kafka(kafka_uri):
    r = replay_cli("tail", "-f", kafka_uri, "numbers", "--wait-timeout", "0.5", expect=3)
    assert r.stderr.splitlines()[-1] == (f"replay: error: no stream 'numbers' in log {kafka_uri} after waiting 0.5 s "
                                         "(--wait-timeout)")
