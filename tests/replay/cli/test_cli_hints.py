"""Every hint the CLI prints is a command that works (issue 35 §3): each test triggers an error or note that
suggests something, takes the suggested command (or option, or value) out of the message, runs it, and checks
that it does what was promised — at the least that it is no usage error (exit 2).

Also: wall-clock times in milliseconds (``@<ms>ms`` and bare integers of 12+ digits) select what the equivalent
ISO-8601 time selects."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

import eventlog.encoding.arrow_file as arrow_file
from capture import Capture
from connectors.files.log import FileLog
from eventlog import open_log
from replay.cli import main
from replay.cli._wallclock import FORMS_HELP, ts_iso
from tests.support.cli import ENV, MODULE, SCHEMA, capture_numbers, jsonl, replay_cli
from tests.support.damage import part_files
from tests.support.paths import ROOT

T0 = 1_764_064_800_000
"""2025-11-25T10:00:00Z in ms since the epoch."""


def error_line(result) -> str:
    """The line of stderr that says what was wrong (click's ``Error: …`` or ours ``replay: error: …``)."""
    lines = [line for line in result.stderr.splitlines() if line.startswith(("Error: ", "replay: error: "))]
    assert lines, result.stderr
    return lines[-1]


def suggested(text: str, pattern: str) -> list[str]:
    """The command ``pattern`` (a regex whose group 1 is ``replay …``) finds in ``text``, as arguments after
    ``replay``."""
    m = re.search(pattern, text)
    assert m, f"no hint matching {pattern!r} in: {text}"
    words = shlex.split(m.group(1))
    assert words[0] == "replay", words
    return words[1:]


def run_suggested(args: list[str], expect: int | None = 0):
    """Run a suggested command in-process; never a usage error."""
    r = replay_cli(*args, expect=expect)
    assert r.exit_code != 2, f"the hint `replay {shlex.join(args)}` is itself a usage error:\n{r.stderr}"
    return r


@pytest.fixture
def log(tmp_path) -> str:
    """A finished stream ``numbers`` (2 parts, 3 times) and an unfinished ``open`` in a file log."""
    uri = str(tmp_path / "log")
    capture_numbers(uri, peers=2, times=3)
    capture_numbers(uri, stream="open", peers=1, times=2, finish=False)
    return uri


# -- a stream's or a part's folder passed as the log (_common.not_a_log) ----------------------------------------------


STREAM_FOLDER_COMMANDS = [
    # (command line with {f} the stream folder, {log} its log, {tmp} a scratch folder; exit code of the hint)
    ("ls {f}", 0),
    ("ls {f} --quick --json", 0),
    ("info {f} numbers", 0),
    ("cat {f} numbers --since 1 -n 3", 0),
    ("tail {f} numbers -n 1", 0),
    ("tail -f {f} numbers --interval 0.01", 0),
    ("stats {f} numbers --limit 0", 0),
    ("frontier {f} numbers", 0),
    ("verify {f}", 0),
    ("verify {f} numbers", 0),
    ("sql {f} 'select count(*) from numbers'", 0),
    ("dump {f} numbers 0 1", 0),
    ("seek {f} numbers -1d", 0),
    ("export {f} numbers {tmp}/out.jsonl", 0),
    ("diff {f} {f} numbers", 0),
    ("copy {f} {tmp}/copy numbers", 0),
    ("gen {f} fresh --times 2", 0),
    ("run {f} numbers --fn builtins:print", 0),
]


@pytest.mark.parametrize("line, code", STREAM_FOLDER_COMMANDS, ids=[c for c, _ in STREAM_FOLDER_COMMANDS])
def test_a_stream_folder_hint_is_the_command_corrected(log, tmp_path, line, code):
    if line.startswith("sql"):
        pytest.importorskip("duckdb")
    args = shlex.split(line.format(f=f"{log}/numbers", log=log, tmp=tmp_path))
    r = replay_cli(*args, expect=2)
    assert "is the folder of stream 'numbers', not a log" in r.stderr
    fixed = suggested(error_line(r), r"pass its log(?: and the stream name)?: (replay .*)$")
    assert f"{log}/numbers" not in fixed  # every stream folder replaced by its log
    assert log in fixed
    if args[0] in ("ls", "sql"):  # they take no stream: `replay ls LOG STREAM` would be a usage error
        assert "numbers" not in fixed[:2] and fixed[:2] == [args[0], log]
    run_suggested(fixed, expect=code)


@pytest.mark.parametrize("line", ["cat {f} numbers", "tail {f} numbers -n 100", "ls {f}", "info {f} numbers",
                                  "stats {f} numbers", "verify {f}", "seek {f} numbers -1d"])
def test_a_part_folder_hint_adds_the_part_where_the_command_takes_one(log, line):
    folder = f"{log}/numbers/part=1"
    args = shlex.split(line.format(f=folder))
    r = replay_cli(*args, expect=2)
    assert "is the folder of part 1 of stream 'numbers'" in r.stderr
    fixed = suggested(error_line(r), r"pass its log(?: and the stream name)?: (replay .*)$")
    assert folder not in fixed
    if args[0] in ("cat", "tail", "seek"):
        assert fixed[-2:] == ["--part", "1"]
    out = run_suggested(fixed)
    if args[0] in ("cat", "tail"):
        assert {row["part"] for row in jsonl(out)} == {1}


def test_a_folder_hint_keeps_paths_with_spaces_quoted(tmp_path):
    log = tmp_path / "my log"
    capture_numbers(str(log), peers=1, times=1)
    r = replay_cli("cat", log / "numbers", "numbers", expect=2)
    fixed = suggested(error_line(r), r"pass its log and the stream name: (replay .*)$")
    assert fixed == ["cat", str(log), "numbers"]
    run_suggested(fixed)


# -- a missing stream: the streams there are, and a typo's correction (_common.stream_header) -------------------------


@pytest.mark.parametrize("line", ["info {log} nubmers", "cat {log} nubmers --kind messages", "stats {log} nubmers",
                                  "verify {log} nubmers", "export {log} nubmers {tmp}/out.csv",
                                  "seek {log} nubmers @1764064800"])
def test_a_stream_name_with_a_typo_gets_the_corrected_command(log, tmp_path, line):
    r = replay_cli(*shlex.split(line.format(log=log, tmp=tmp_path)), expect=3)
    assert "it has: numbers, open" in r.stderr
    fixed = suggested(error_line(r), r"did you mean 'numbers'\? (replay .*?) \(stream 'nubmers'\)$")
    assert "nubmers" not in fixed and "numbers" in fixed
    run_suggested(fixed)


def test_every_stream_a_missing_stream_message_lists_can_be_read(log):
    r = replay_cli("info", log, "nothing-like-it", expect=3)
    names = re.search(r"it has: ([^;(]*)", r.stderr).group(1).strip().split(", ")
    assert names == ["numbers", "open"] and "did you mean" not in r.stderr
    for name in names:
        run_suggested(["info", log, name])


def test_diff_names_the_typo_but_suggests_no_command_for_two_logs(log, tmp_path):
    other = str(tmp_path / "other")
    capture_numbers(other, stream="nubmers", peers=1, times=1)
    r = replay_cli("diff", other, log, "nubmers", expect=3)
    assert "did you mean 'numbers'?" in r.stderr and "replay diff" not in r.stderr  # `nubmers` is right in A


# -- an unexpected error: the command again with --debug (_common.ReplayGroup) ----------------------------------------


def test_an_unexpected_error_suggests_the_same_command_with_debug(log, monkeypatch):
    def boom(self, stream):  # noqa: ANN001, ANN202
        raise RuntimeError("boom")

    monkeypatch.setattr(FileLog, "header", boom)
    r = replay_cli("info", log, "numbers", "--json", expect=3)
    assert error_line(r).startswith("replay: error: RuntimeError: boom (run `replay --debug info ")
    args = suggested(error_line(r), r"run `(replay [^`]*)` for the traceback")
    assert args == ["--debug", "info", log, "numbers", "--json"]
    shown = replay_cli(*args, expect=None)
    assert isinstance(shown.exception, RuntimeError) and str(shown.exception) == "boom"  # the traceback, not a line


# -- click's own hints ------------------------------------------------------------------------------------------------


def test_clicks_try_help_hint_works_as_typed(log):
    r = subprocess.run([*MODULE, "tail", log], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    m = re.search(r"Try '(replay [^']+)' for help", r.stderr)
    assert m, r.stderr
    shown = subprocess.run([*MODULE, *shlex.split(m.group(1))[1:]], cwd=ROOT, env=ENV, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0 and "--wait-timeout" in shown.stdout


def test_clicks_did_you_mean_an_option_works(log):
    r = replay_cli("cat", log, "numbers", "--sinse", "1", expect=2)
    m = re.search(r"Did you mean (?:one of: )?([-',a-z ]+)\?", r.stderr)
    assert m, r.stderr
    options = [o.strip(" '") for o in m.group(1).split(",")]
    assert "--since" in options and all(o.startswith("--") for o in options), r.stderr
    run_suggested(["cat", log, "numbers", "--since", "1"])


# -- option and value hints -------------------------------------------------------------------------------------------


def test_offset_zero_says_which_offsets_to_use(log):
    r = replay_cli("cat", log, "numbers", "--offset", "0", expect=2)
    line = error_line(r)
    assert "1 (or beginning)" in line and "-N" in line and "(-5)" in line
    full = jsonl(replay_cli("cat", log, "numbers"))
    for value in ("1", "beginning", "-5"):
        got = jsonl(run_suggested(["cat", log, "numbers", "--offset", value]))
        assert got and (got == full if value != "-5" else len(got) <= len(full))


def test_a_bad_time_says_which_times_to_write(log, tmp_path):
    r = replay_cli("cat", log, "numbers", "--since", "x", expect=2)
    assert "write an int (7) or a product time (1,2)" in r.stderr
    run_suggested(["cat", log, "numbers", "--since", "7"])
    grid = str(tmp_path / "grid")
    replay_cli("gen", grid, "g", "--product", "--times", "3")
    run_suggested(["cat", grid, "g", "--since", "1,2"])


def test_an_existing_output_file_hint_force_works(log, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    for args in (["export", log, "numbers", str(out)], ["dump", log, "numbers", "0", "1", "-o", str(out)]):
        r = replay_cli(*args, expect=2)
        assert "pass --force to overwrite it" in r.stderr
        run_suggested([*args, "--force"])


def test_limit_notes_hints_work(log):
    for command in ("stats", "frontier"):
        r = replay_cli(command, log, "numbers", "--limit", "1")
        m = re.search(r"not shown \(--limit 1\): .*; (--limit 0) shows every row(?:, --moves-only [^,]*)?, (--json) "
                      r"lists them all", r.stderr)
        assert m, r.stderr
        every = run_suggested([command, log, "numbers", *m.group(1).split()])
        assert "not shown" not in every.stderr and len(every.stdout) > len(r.stdout)
        json.loads(run_suggested([command, log, "numbers", m.group(2)]).stdout)


def test_held_records_note_uncommitted_works(tmp_path):
    log = str(tmp_path / "log")
    cap = Capture(open_log(log), "held", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1, "word": "done"}])
    cap.advance_to(1)
    cap.send(5, [{"n": 5, "word": "held"}])  # time 5 is not complete: committed readers hold it
    cap.abort()
    r = replay_cli("cat", log, "held", "--kind", "messages")
    assert [row["record"]["n"] for row in jsonl(r)] == [1]
    m = re.search(r"part 0: .*; (--uncommitted) shows them", r.stderr)
    assert m, r.stderr
    shown = run_suggested(["cat", log, "held", "--kind", "messages", m.group(1)])
    assert [row["record"]["n"] for row in jsonl(shown)] == [1, 5]


def test_export_format_and_incomplete_hints_work(log, tmp_path):
    r = replay_cli("export", log, "numbers", tmp_path / "out.data", expect=2)
    m = re.search(r"pass --to ([a-z|]+)", r.stderr)
    assert m, r.stderr
    for fmt in m.group(1).split("|"):
        run_suggested(["export", log, "numbers", str(tmp_path / f"out-{fmt}.data"), "--to", fmt])
    r = replay_cli("export", log, "open", tmp_path / "open.jsonl", "--force")
    if "--incomplete" in r.stderr:
        assert re.search(r"left out .*; --incomplete exports them too", r.stderr)
        run_suggested(["export", log, "open", str(tmp_path / "open.jsonl"), "--force", "--incomplete"])


def test_copy_to_an_existing_stream_hint_to_stream_works(log, tmp_path):
    dst = str(tmp_path / "dst")
    replay_cli("copy", log, dst, "numbers")
    r = replay_cli("copy", log, dst, "numbers", expect=2)
    assert "choose another --to-stream" in r.stderr
    run_suggested(["copy", log, dst, "numbers", "--to-stream", "numbers2"])


def test_import_hints_work(tmp_path):
    rows = tmp_path / "rows.data"
    rows.write_text('{"n": 1, "word": "a"}\n{"n": 2, "word": "b"}\n')
    log = str(tmp_path / "log")
    r = replay_cli("import", rows, log, "s", "--format", "jsonl", expect=2)
    assert "pass either --time COLUMN or --time-const T" in r.stderr
    r = replay_cli("import", rows, log, "s", "--time-const", "0", expect=2)
    m = re.search(r"pass --format ([a-z|]+)", r.stderr)
    assert m and "jsonl" in m.group(1).split("|"), r.stderr
    run_suggested(["import", str(rows), log, "s", "--time-const", "0", "--format", "jsonl"])
    assert len(jsonl(replay_cli("cat", log, "s", "--kind", "messages"))) == 2
    run_suggested(["import", str(rows), log, "t", "--format", "jsonl", "--time", "n"])  # the other choice


def produce(*args: object, input: str):  # noqa: A002 - click's name
    r = CliRunner().invoke(main, [str(a) for a in args], input=input)
    return r


def test_produce_field_typo_did_you_mean_works(log):
    r = produce("produce", log, "open", "--part", "0", input='{"n": 1, "wrod": "x"}\n')
    assert r.exit_code == 3, r.stderr
    m = re.search(r"field 'wrod' is not in the stream's schema \(did you mean '(\w+)'\?", r.stderr)
    assert m and m.group(1) == "word", r.stderr
    fixed = produce("produce", log, "open", "--part", "0", input=f'{{"n": 1, "{m.group(1)}": "x"}}\n')
    assert fixed.exit_code == 0, fixed.stderr


def test_produce_pass_time_hint_works(tmp_path):
    log = str(tmp_path / "log")
    cap = Capture(open_log(log), "grid", 0, 1, schema=SCHEMA, time="product:2")
    cap.advance_to([(1, 0), (0, 1)])  # a frontier of two times
    cap.abort()
    r = produce("produce", log, "grid", "--part", "0", input='{"n": 1, "word": "x"}\n')
    assert r.exit_code == 2 and "is not one time: pass --time" in r.stderr, r.stderr
    fixed = produce("produce", log, "grid", "--part", "0", "--time", "1,0", input='{"n": 1, "word": "x"}\n')
    assert fixed.exit_code == 0, fixed.stderr


def test_produce_note_advance_to_or_finish_names_options_that_work(log):
    r = produce("produce", log, "open", "--part", "0", input='{"n": 1, "word": "x"}\n')
    assert r.exit_code == 0, r.stderr
    m = re.search(r"until the part's frontier passes time \d+: (replay produce .*) \(or --finish\)$", r.stderr, re.M)
    assert m and "--advance-to" in m.group(1), r.stderr
    run_suggested(suggested(m.group(1), r"(replay .*)"))  # the command to paste, run as printed
    # and its alternative
    assert produce("produce", log, "open", "--part", "0", "--no-records", "--finish", input="").exit_code == 0


def test_dump_of_a_missing_event_hint_verify_works(log):
    r = replay_cli("dump", log, "numbers", "0", "999", expect=None)
    assert r.exit_code not in (0, 2), r.stderr
    fixed = suggested(r.stderr, r"`(replay verify [^`]*)` says what is damaged")
    assert fixed == ["verify", log, "numbers"]
    run_suggested(fixed)


def test_ls_torn_tail_hint_verify_works(tmp_path, file_format_1):
    log = str(tmp_path / "log")
    capture_numbers(log, peers=2, times=3, finish=False)
    with open(part_files(log, ".index", part=0)[-1], "ab") as f:
        f.write(b"\x07" * 10)  # half an index entry: a writer died mid-append
    r = replay_cli("ls", log)
    fixed = suggested(r.stderr, r"part 0 ends in a torn tail \(`(replay [^`]*)` tells more\)")
    assert fixed == ["verify", log, "numbers"]
    found = run_suggested(fixed, expect=1)  # 1: verify found the problem it was sent to look at
    assert "torn" in found.stdout + found.stderr


def test_a_missing_extra_names_extras_that_exist(log, tmp_path, monkeypatch):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "duckdb", None)
    for args in (["frontier", log, "numbers", "--plot", str(tmp_path / "p.png")], ["sql", log, "select 1"]):
        r = replay_cli(*args, expect=3)
        named = re.findall(r"'eventlog\[(\w+)\]'", r.stderr)
        assert len(named) == 2 and "pip install" in r.stderr, r.stderr
        assert all(name in extras for name in named)


# -- wall-clock times: the hints of refused values, and milliseconds --------------------------------------------------


@pytest.fixture
def stamped(tmp_path, monkeypatch) -> str:
    """Stream ``s`` of one part: time t written at T0 + 1 s·t (its progress 100 ms later), 5 times."""
    now = [T0]
    monkeypatch.setattr(arrow_file, "now_ms", lambda: now[0])
    log = str(tmp_path / "log")
    cap = Capture(open_log(log), "s", 0, 1, schema=SCHEMA)
    for t in range(5):
        now[0] = T0 + 1000 * t
        cap.send(t, [{"n": t, "word": f"t{t}"}])
        now[0] = T0 + 1000 * t + 100
        cap.advance_to(t + 1)
    cap.close()
    return log


def selected(log: str, *args: str) -> list[int]:
    return [row["record"]["n"] for row in jsonl(replay_cli("cat", log, "s", "--kind", "messages", *args))]


def test_milliseconds_select_what_the_equivalent_iso_time_selects(stamped):
    cut = T0 + 2000
    iso = ts_iso(cut)
    assert iso == "2025-11-25T10:00:02.000Z"
    want = selected(stamped, "--since-ts", iso)
    assert want == [2, 3, 4]
    assert selected(stamped, "--since-ts", f"@{cut}ms") == want
    assert selected(stamped, "--since-ts", str(cut)) == want  # a bare 13-digit integer: milliseconds, as kcat's s@
    assert selected(stamped, "--since-ts", f"@{cut // 1000}.{cut % 1000:03d}") == want
    upto = T0 + 1100
    assert selected(stamped, "--until-ts", str(upto)) == selected(stamped, "--until-ts", ts_iso(upto)) == [0, 1]
    seek = json.loads(replay_cli("seek", stamped, "s", str(cut), "--json").stdout)
    assert seek == json.loads(replay_cli("seek", stamped, "s", iso, "--json").stdout)
    assert seek[0]["ts_ms"] == cut  # what seek shows can be passed back as it is


@pytest.mark.parametrize("value", ["@1764064802000", str(T0 // 1000 + 2), "17640648020"])
def test_every_value_a_refused_when_suggests_is_accepted(stamped, value):
    r = replay_cli("cat", stamped, "s", "--since-ts", value, expect=2)
    line = error_line(r)
    hints = re.findall(r"@[\d.]+(?:ms)?(?=[ ),]|$)", line.split(":", 2)[-1])
    hints = [h for h in hints if h != value]
    assert hints, line
    for h in hints:
        run_suggested(["cat", stamped, "s", "--since-ts", h])
    if value.startswith("@"):  # the milliseconds it meant, both ways the hint writes them
        assert {tuple(selected(stamped, "--since-ts", h)) for h in hints} == {(2, 3, 4)}


def test_every_form_the_time_help_shows_is_accepted(stamped):
    r = replay_cli("cat", stamped, "s", "--since-ts", "yesterday", expect=2)
    assert FORMS_HELP in r.stderr.replace("\n", " ") or "ISO-8601" in r.stderr
    examples = [e.strip() for group in re.findall(r"\(([^()]*)\)", FORMS_HELP) for e in group.split(",")]
    examples = [e.split(";")[0].split(": ")[-1] for e in examples if e]
    assert {"2026-11-25T10:00:00Z", "@1764064800.5", "@1764064800500ms", "1764064800500", "-10m"} <= set(examples)
    for e in examples:
        run_suggested(["cat", stamped, "s", "--since-ts", e])


# -- Kafka ------------------------------------------------------------------------------------------------------------


@pytest.mark.kafka
def test_kafka_ls_of_a_cluster_lists_uris_that_list_their_streams(kafka_uri):
    capture_numbers(kafka_uri, peers=1, times=1)
    cluster = kafka_uri.rsplit("/", 1)[0]
    prefix = kafka_uri.rsplit("/", 1)[1]
    doc = json.loads(replay_cli("ls", cluster, "--quick", "--json").stdout)
    (ours,) = [p for p in doc["prefixes"] if p["prefix"] == prefix]
    listed = json.loads(run_suggested(["ls", ours["uri"], "--quick", "--json"]).stdout)
    assert [s["stream"] for s in listed] == ["numbers"]


@pytest.mark.kafka
def test_kafka_stream_typo_hint_works(kafka_uri):
    capture_numbers(kafka_uri, peers=1, times=1)
    r = replay_cli("info", kafka_uri, "nubmers", expect=3)
    fixed = suggested(error_line(r), r"did you mean 'numbers'\? (replay .*?) \(stream 'nubmers'\)$")
    run_suggested(fixed)
