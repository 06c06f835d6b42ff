"""``squeue --json`` read as squeue prints it (slurm_plugin/answerstream.py): the same jobs and
the same errors as the whole-text reader (``parse_jobs_json``), whatever the pieces the
pipe cuts it into, without the answer's bytes or text in memory whole."""

from __future__ import annotations

import stat
import subprocess
import sys
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from coscheduler.bench.jsonread import squeue_like
from slurm_plugin.commands import SlurmCommands
from slurm_plugin.answerstream import JobsStream
from slurm_plugin.parse import ParseError, parse_jobs_json
from slurm_plugin.source import CommandLineSource
from slurm_answers import ODD_ANSWERS, RECORDED, streamed, surprised

WHAT = "Slurm 24.11.5: `squeue --json=v0.0.42 --states=all`"


def _whole(text: str, what: str = "squeue --json"):
    try:
        return parse_jobs_json(text, what)
    except ParseError as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 4096, 1 << 20])
def test_recorded_answers_of_three_releases_read_the_same_in_any_pieces(piece):
    assert len(RECORDED) >= 5
    for path in RECORDED:
        raw = path.read_bytes()
        want = parse_jobs_json(raw.decode())
        assert want and streamed(raw, piece) == want, (path, piece)


@pytest.mark.parametrize("text", ODD_ANSWERS)
@pytest.mark.parametrize("piece", [1, 5, 1 << 16])
def test_odd_answers_give_the_same_jobs_or_error_or_are_read_again_whole(text, piece):
    want, got = _whole(text), streamed(text.encode(), piece)
    if isinstance(want, list):
        assert got == want          # an answer the whole reader reads is read here too
    else:
        # a record's or Slurm's own error is said here the same way; anything else is a
        # surprise, and the caller reads the answer again whole
        assert got == want or (isinstance(got, tuple) and got[0] == "surprise"), (got, want)
    assert streamed(text.encode(), piece) == got     # (and the same each time)


def test_which_odd_answers_are_read_again_whole():
    surprises = [t for t in ODD_ANSWERS if surprised(t)]
    # not an object, not JSON, trailing data, cut short, too deep, empty: nothing else
    assert len(surprises) == 7, surprises
    assert all(_whole(t)[0] is ParseError for t in surprises)


@pytest.mark.parametrize("piece", [1, 2, 3, 4])
def test_pieces_cut_inside_a_character_an_escape_and_a_line_end(piece):
    names = ["é€日本", '\\"[[[[{{{{', "a\\\\", "\\\\\\\"]]]", "x\\u00e9\\ud83d\\ude00"]
    recs = ",\r\n".join(
        '{"job_id": %d, "job_state": "RUNNING", "name": "%s"}' % (i, n) for i, n in enumerate(names, 1))
    raw = ('{"jobs": [\r\n' + recs + '\r\n], "errors": []}\r\n').encode()
    want = parse_jobs_json(raw.decode().replace("\r\n", "\n"))
    assert [j.name for j in want][0] == "é€日本"
    # brackets inside strings never count toward the nesting bound, however it is cut
    s = JobsStream("squeue --json", max_depth=3)
    for k in range(0, len(raw), piece):
        s.feed(raw[k:k + piece])
    assert s.finish() == want


def test_bytes_that_are_not_utf8_are_shown_as_by_the_whole_text_reader():
    raw = b'{"jobs": [{"job_id": 1, "job_state": "RUNNING", "name": "a\xffb\xc3"}]}'
    want = parse_jobs_json(raw.decode("utf-8", errors="replace"))
    assert want[0].name == "a\ufffdb\ufffd"
    for piece in (1, 2, len(raw)):
        assert streamed(raw, piece) == want


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 12), cuts=st.lists(st.integers(1, 9000), min_size=1, max_size=30))
def test_any_cut_of_any_answer_reads_the_same(n, cuts):
    raw = squeue_like(n)
    want = parse_jobs_json(raw.decode())
    s, at = JobsStream("squeue --json"), 0
    for c in cuts:
        s.feed(raw[at:at + c])
        at += c
    s.feed(raw[at:])
    assert s.finish() == want


# -- through a command, as the backend reads it --------------------------------------------------

def _fake_slurm(tmp_path, squeue_body: str) -> SlurmCommands:
    for name, body in (("scontrol", "print('slurm 24.11.5')"), ("squeue", squeue_body)):
        p = tmp_path / name
        p.write_text(f"#!{sys.executable}\n{body}\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return SlurmCommands(bin_dir=str(tmp_path), sleep=lambda s: None)


@pytest.mark.parametrize("text", ODD_ANSWERS)
def test_through_squeue_an_odd_answer_gives_the_whole_text_readers_jobs_or_error(tmp_path, text):
    answer = tmp_path / "answer.json"
    answer.write_bytes(text.encode())
    cmds = _fake_slurm(tmp_path, f"import sys\nsys.stdout.buffer.write(open({str(answer)!r}, 'rb').read())")
    try:
        got = CommandLineSource(cmds).jobs()
    except ParseError as exc:
        got = type(exc), str(exc)
    assert got == _whole(text, WHAT)
    # squeue asked again only when the stream was surprised (+1 for scontrol --version)
    assert cmds.calls == (3 if surprised(text) else 2)


def test_a_try_that_fails_halfway_is_forgotten_and_the_retry_read_alone(tmp_path):
    raw = (FIXTURES / "slurm" / "24.11" / "squeue.json").read_bytes()
    answer, tries = tmp_path / "answer.json", tmp_path / "tries"
    answer.write_bytes(raw)
    cmds = _fake_slurm(tmp_path, (
        "import os, sys\n"
        f"t = {str(tries)!r}\n"
        "n = int(open(t).read()) if os.path.exists(t) else 0\n"
        "open(t, 'w').write(str(n + 1))\n"
        f"raw = open({str(answer)!r}, 'rb').read()\n"
        "if n == 0:\n"
        "    sys.stdout.buffer.write(raw[:len(raw) * 2 // 3]); sys.stdout.flush()\n"
        "    sys.stderr.write('squeue: error: Socket timed out on send/recv operation\\n')\n"
        "    sys.exit(1)\n"
        "sys.stdout.buffer.write(raw)\n"))
    jobs = CommandLineSource(cmds).jobs()
    assert jobs == parse_jobs_json(raw.decode()) and len(jobs) == 10
    assert tries.read_text() == "2" and cmds.calls == 3


def test_a_large_answer_is_never_held_whole(tmp_path):
    raw = squeue_like(2000)
    answer = tmp_path / "answer.json"
    answer.write_bytes(raw)
    cmds = _fake_slurm(tmp_path, f"import shutil, sys\n"
                                 f"shutil.copyfileobj(open({str(answer)!r}, 'rb'), sys.stdout.buffer)")
    CommandLineSource(cmds).jobs()          # (scontrol --version asked once, outside the count)
    tracemalloc.start()
    try:
        streamed = CommandLineSource(cmds).jobs()
        peak_streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        whole = parse_jobs_json(cmds.run("squeue", "--json=v0.0.42", "--states=all"), WHAT)
        peak_whole = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert streamed == whole and len(whole) == 2000
    # the whole-text read holds the bytes and the text (about 2 x 18 MB here); the stream
    # holds the jobs and a piece or two (figures: `cosched bench squeue`)
    assert peak_streamed < peak_whole / 4, (peak_streamed, peak_whole)
    assert peak_streamed < len(raw) / 4, (peak_streamed, len(raw))


def test_the_agent_side_of_the_bound_needs_no_numpy_for_a_shallow_answer():
    """DepthStream, like nesting_depth, scans with numpy only past the limit's openers."""
    code = ("import sys\n"
            "from coscheduler.boundedjson import DepthStream\n"
            "d = DepthStream(64)\n"
            "for piece in (b'{\"a\": [1, 2', b', {\"b\": 3}]}'):\n"
            "    d.feed(piece)\n"
            "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out


def test_the_bench_prints_both_pairs_side_by_side():
    import json

    from click.testing import CliRunner

    from slurm_plugin.bench_squeue import squeue
    res = CliRunner().invoke(squeue, ["--jobs", "40", "--repeat", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for way in ("whole_tree", "per_job", "command_whole_text", "command_streamed"):
        assert out[f"{way}_s"] > 0 and out[f"{way}_peak_mb"] >= 0, out
    assert out["jobs"] == 40 and out["command_peak_ratio"] > 0



def test_the_readers_own_time_does_not_count_toward_the_commands_timeout(tmp_path):
    """Parsing a job at a time happens while squeue prints: a large answer parsed slower
    than the timeout allows must not be taken for a hung squeue (killed and retried)."""
    class SlowReader:
        def __init__(self):
            self.pieces = 0

        def feed(self, raw: bytes) -> None:
            self.pieces += 1
            time.sleep(0.15)

    p = tmp_path / "printer"
    p.write_text(f"#!{sys.executable}\nimport sys\n"
                 "for _ in range(12):\n"
                 "    sys.stdout.buffer.write(b'x' * 65536); sys.stdout.flush()\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    cmds = SlurmCommands(bin_dir=str(tmp_path), timeout_s=1.0, retries=0)
    t0 = time.monotonic()
    reader = cmds.stream("printer", reader=SlowReader)
    assert reader.pieces >= 12 and time.monotonic() - t0 > 1.5 and cmds.calls == 1
