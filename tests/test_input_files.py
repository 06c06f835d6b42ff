"""Input files the commands read (traces, model files, tokens and secrets, checkpoints):
regular files only, opened without blocking, bounded in size (coscheduler/boundedfile.py);
bad input is one line naming the file, a non-zero exit, no traceback and no hang. Large
inputs are sparse files (refused by their size before any read) or small configured caps;
a FIFO is tried in a subprocess with a timeout, so a hang fails the test instead of the
suite."""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from coscheduler import boundedfile
from coscheduler.model import InvalidInput
from coscheduler.sim import swf
from coscheduler.sim.swf import SwfFormatError, read_swf

ROOT = Path(__file__).resolve().parents[1]
MEMORY = 3 << 30     # a child's address space: a reader that reads GBs fails, not the machine
HEADER = "; MaxNodes: 4\n"
JOB = "1 0 0 10 1 -1 -1 1 10 -1 1 1 1 1 1 1 -1 -1\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run_cli(*args: str, timeout: float = 60, env: dict | None = None,
            cwd: str | None = None) -> subprocess.CompletedProcess:
    """``python -m coscheduler ARGS`` from this checkout, in a bounded address space; a
    hang is a failed test (TimeoutExpired)."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "coscheduler", *args], capture_output=True,
                          text=True, timeout=timeout, env=e, cwd=cwd,
                          preexec_fn=_limit_memory)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed with a short error naming each needle, and no traceback."""
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    err = r.stderr.strip()
    for n in needles:
        assert n in err, err
    return err


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


# -- the helper ----------------------------------------------------------------------------------

def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = ("import sys; from coscheduler import boundedfile as b\n"
            "try:\n    b.read_regular(sys.argv[1], 100)\n"
            "except b.FileUnusable as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True,
                       timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.strip() == f"{fifo}: not a regular file (a FIFO)"


def test_devices_directories_and_links_when_not_followed_are_refused(tmp_path):
    with pytest.raises(boundedfile.FileUnusable, match="not a regular file \\(a character device"):
        boundedfile.read_regular("/dev/zero", 100)
    with pytest.raises(boundedfile.FileUnusable, match="not a regular file \\(a directory"):
        boundedfile.read_regular(tmp_path, 100)
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert boundedfile.read_regular(tmp_path / "link", 100) == b"x"
    with pytest.raises(boundedfile.FileUnusable, match="cannot be opened .a symbolic link, not followed"):
        boundedfile.read_regular(tmp_path / "link", 100, follow=False)
    with pytest.raises(FileNotFoundError):
        boundedfile.read_regular(tmp_path / "missing", 100)


def test_the_size_cap_is_checked_before_reading(tmp_path):
    big = sparse(tmp_path / "big", 6 << 30)    # 6 GB, no block written
    with pytest.raises(boundedfile.FileTooLarge,
                       match=f"{big}: 6442450944 bytes, more than the 1000 allowed; HINT"):
        boundedfile.read_regular(big, 1000, hint="; HINT")
    (tmp_path / "ok").write_bytes(b"a" * 1000)
    assert len(boundedfile.read_regular(tmp_path / "ok", 1000)) == 1000


def test_gunzip_stops_past_its_cap_and_names_the_file():
    bomb = gzip.compress(b"\0" * 1_000_000)
    assert len(boundedfile.gunzip(bomb, 1_000_000, "t.gz")) == 1_000_000
    with pytest.raises(boundedfile.FileTooLarge, match="t.gz: unpacks to more than the 999999"):
        boundedfile.gunzip(bomb, 999_999, "t.gz")
    two = gzip.compress(b"ab") + gzip.compress(b"cd")     # every member
    assert boundedfile.gunzip(two, 10, "t.gz") == b"abcd"
    with pytest.raises(boundedfile.FileUnusable, match="t.gz: not a readable gzip file"):
        boundedfile.gunzip(bomb[:-10], 10 << 20, "t.gz")


def test_a_secret_line_is_utf8_and_not_empty(tmp_path):
    f = tmp_path / "s"
    f.write_bytes(b"\n  tok  \nsecond\n")
    assert boundedfile.read_line_secret(f, "the token file") == "tok"
    f.write_bytes(b"")
    with pytest.raises(boundedfile.FileUnusable, match="the token file: empty"):
        boundedfile.read_line_secret(f, "the token file")
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(boundedfile.FileUnusable, match="the token file: not UTF-8"):
        boundedfile.read_line_secret(f, "the token file")


# -- SWF traces ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ("simulate", "swf", "{p}"),
    ("workload", "batsim", "--from", "{p}", "--out", "{d}/o.json"),   # is_batsim's peek
])
def test_a_fifo_trace_is_refused_at_once(tmp_path, command):
    fifo = tmp_path / "t.swf"
    os.mkfifo(fifo)
    r = run_cli(*(a.format(p=fifo, d=tmp_path) for a in command), timeout=30)
    assert one_line_error(r, str(fifo), "not a regular file (a FIFO)").count("\n") == 0


def test_a_device_or_a_sparse_6gb_trace_is_refused_without_reading_it(tmp_path):
    r = run_cli("simulate", "swf", "/dev/zero", timeout=30)
    one_line_error(r, "/dev/zero: not a regular file (a character device)")
    big = sparse(tmp_path / "big.swf", 6 << 30)
    r = run_cli("simulate", "swf", str(big), timeout=30)
    one_line_error(r, f"{big}: 6442450944 bytes, more than the {swf.DEFAULT_MAX_TRACE_BYTES} "
                      f"allowed (set {swf.MAX_BYTES_ENV} to read a larger trace)")


def test_a_gzip_trace_that_unpacks_past_the_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(swf.MAX_BYTES_ENV, "100000")
    bomb = tmp_path / "t.swf.gz"
    bomb.write_bytes(gzip.compress((HEADER + JOB).encode() + b" " * 200_000))
    with pytest.raises(SwfFormatError, match=f"{bomb}: unpacks to more than the 100000 bytes "
                                             f"allowed \\(set {swf.MAX_BYTES_ENV}"):
        read_swf(bomb)
    plain = tmp_path / "t.swf"
    plain.write_text(HEADER + JOB + " " * 100_000)
    with pytest.raises(SwfFormatError, match=f"{plain}: 100057 bytes, more than the 100000 allowed"):
        read_swf(plain)
    monkeypatch.setenv(swf.MAX_BYTES_ENV, "200100")
    assert len(read_swf(bomb).jobs) == 1
    monkeypatch.setenv(swf.MAX_BYTES_ENV, "lots")
    with pytest.raises(InvalidInput, match=f"{swf.MAX_BYTES_ENV}='lots': must be a positive"):
        read_swf(plain)


def test_a_long_line_is_refused_by_its_length_before_pandas_splits_it(tmp_path, monkeypatch):
    f = tmp_path / "t.swf"
    f.write_text(HEADER + JOB + " ".join(["1"] * 5000) + "\n")

    def no_table(*_a):
        raise AssertionError("the long line reached pandas")

    monkeypatch.setattr(swf, "_job_table", no_table)
    for vectorised in (True, False):
        with pytest.raises(SwfFormatError, match=f"{f}:3: line of 9999 characters, longer "
                                                 "than the 4096 a job line may have"):
            read_swf(f, vectorised=vectorised)
    assert read_swf(f, skip_bad_lines=True).skipped_lines == 1


def test_the_longest_line_is_measured_across_chunks(monkeypatch):
    monkeypatch.setattr(swf, "_CHUNK", 3)
    for raw in (b"", b"a", b"\n", b"ab\nc", b"abc\n\n", b"abcdefg\nab\nabcdefgh\n\n\nabcd"):
        assert swf._longest_line(raw) == max(map(len, raw.split(b"\n")))


@pytest.mark.parametrize("user, reason", [
    ("1_0", "field 'user id' is not a number: '1_0'"),
    ("\uff11", "field 'user id' is not a number: '\uff11'"),
    ("1.5", "field 'user id' must be an integer, got '1.5'"),
])
def test_a_field_float_reads_but_swf_does_not_is_refused_with_its_line(tmp_path, user, reason):
    f = tmp_path / "t.swf"
    f.write_text(HEADER + JOB + JOB.replace("1 0 0 10 1 -1 -1 1 10 -1 1 1 ",
                                            f"2 0 0 10 1 -1 -1 1 10 -1 1 {user} "),
                 encoding="utf-8")
    for vectorised in (True, False):
        with pytest.raises(SwfFormatError, match=f"{f}:3: {reason}"):
            read_swf(f, vectorised=vectorised)


def test_a_header_size_in_other_digits_is_refused(tmp_path):
    f = tmp_path / "t.swf"
    f.write_text("; MaxNodes: \uff14\n" + JOB, encoding="utf-8")
    with pytest.raises(SwfFormatError, match=f"{f}:1: header MaxNodes must start with a "
                                             "positive integer"):
        read_swf(f)


# -- model files ---------------------------------------------------------------------------------

def test_a_fifo_or_a_device_in_the_models_folder_is_refused_at_once(tmp_path):
    from coscheduler.data import swf_trace
    models = tmp_path / "models"
    models.mkdir()
    model = models / "mrsch-lublin_256-S1.model"
    os.mkfifo(model)
    args = ("simulate", "multi", "--from", str(swf_trace("lublin_256.swf")), "--sets", "S1",
            "--methods", "mrsch", "--models", str(models))
    one_line_error(run_cli(*args, timeout=60), f"{model}: model file: not a regular file (a FIFO)")
    model.unlink()
    model.symlink_to("/dev/zero")
    one_line_error(run_cli(*args, timeout=60),
                   f"{model}: model file: not a regular file (a character device)")


def test_a_sparse_6gb_model_file_is_refused_by_its_size(tmp_path):
    from coscheduler.data import swf_trace
    from coscheduler.learned.modelfile import MAX_MODEL_BYTES
    big = sparse(tmp_path / "big.model", 6 << 30)
    r = run_cli("simulate", "swf", str(swf_trace("lublin_256.swf")), "--policy", f"rl:{big}",
                timeout=60)
    one_line_error(r, f"{big}: model file: 6442450944 bytes, more than the {MAX_MODEL_BYTES} "
                      "allowed")


def test_model_weights_that_unpack_past_the_cap_are_refused(tmp_path, monkeypatch):
    import numpy as np

    from coscheduler.learned import modelfile
    path = modelfile.write_model_file({"kind": "x"}, {"w": np.zeros(100_000)}, tmp_path / "m.model")
    assert path.stat().st_size < 10_000
    monkeypatch.setattr(modelfile, "MAX_MODEL_BYTES", 100_000)
    with pytest.raises(modelfile.ModelError, match=f"{path}: the weights unpack to 400128 bytes, "
                                                   "more than the 100000 allowed"):
        modelfile.read_model_file(path)
    monkeypatch.setattr(modelfile, "MAX_MODEL_BYTES", 500)
    with pytest.raises(modelfile.ModelError, match=f"{path}: model file: .* bytes, more than "
                                                   "the 500 allowed"):
        modelfile.read_model_file(path)


def test_a_model_name_that_is_not_a_regular_file_says_what_it_is(tmp_path):
    from coscheduler.learned.registry import resolve
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match=f"model file {fifo}: not a regular file \\(a FIFO\\)"):
        resolve(str(fifo))
    with pytest.raises(InvalidInput, match="model file not found"):
        resolve(str(tmp_path / "missing.model"))


# -- tokens and secrets --------------------------------------------------------------------------

def _read_token_in_child(path: Path) -> str:
    code = ("import sys\nfrom coscheduler.model import InvalidInput\n"
            "from monitoring.api import read_token_file\n"
            "try:\n    read_token_file(sys.argv[1])\nexcept InvalidInput as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       preexec_fn=_limit_memory)
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout.strip()


def test_a_token_file_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path):
    fifo = tmp_path / "tok"
    os.mkfifo(fifo)
    assert _read_token_in_child(fifo) == f"token file {fifo}: not a regular file (a FIFO)"
    assert _read_token_in_child(Path("/dev/zero")) == \
        "token file /dev/zero: not a regular file (a character device)"


def test_a_binary_or_empty_token_file_is_one_error_naming_it(tmp_path):
    from monitoring.api import read_token_file
    from monitoring.client import AgentClient
    f = tmp_path / "tok"
    f.write_bytes(b"\xff\xfe binary token of some length\n")
    with pytest.raises(InvalidInput, match=f"token file {f}: not UTF-8 text"):
        read_token_file(str(f))
    with pytest.raises(InvalidInput, match=f"token file {f}: not UTF-8 text"):
        AgentClient("http://127.0.0.1:9", token_file=str(f))
    f.write_bytes(b"")
    with pytest.raises(InvalidInput, match=f"token file {f}: empty"):
        read_token_file(str(f))


def test_the_agents_own_token_path_is_not_followed_through_a_link(tmp_path):
    from monitoring.cli import _token
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("a" * 32 + "\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / "token").symlink_to(elsewhere)
    with pytest.raises(InvalidInput, match=f"token file {state / 'token'}: cannot be opened"):
        _token(None, state)
    (state / "token").unlink()
    token, path = _token(None, state)           # made, then read back
    assert len(token) >= 16 and path == str(state / "token")
    assert _token(None, state) == (token, path)


def test_an_empty_secret_file_says_so(tmp_path):
    empty = tmp_path / "secret"
    empty.write_bytes(b"")
    r = run_cli("run", "--backend", "mesos", "--master", "http://127.0.0.1:9", "--principal", "p",
                "--secret-file", str(empty), timeout=60)
    one_line_error(r, f"--secret-file {empty}: empty")


# -- training checkpoints ------------------------------------------------------------------------

@pytest.mark.parametrize("content, reason", [(b"", "No data left in file"),
                                             (b"PK\x03\x04abc", "File is not a zip file")])
def test_a_damaged_rl_checkpoint_is_one_error_naming_it(tmp_path, content, reason):
    from coscheduler.learned.train import _load_checkpoint
    ckpt = tmp_path / "o.model.ckpt"
    ckpt.write_bytes(content)
    with pytest.raises(InvalidInput, match=f"{ckpt}: not a readable training checkpoint "
                                           f"\\({reason}\\); remove it or pass --fresh"):
        _load_checkpoint(ckpt)


@pytest.mark.parametrize("code", [
    "from coscheduler.learned.train import _load_checkpoint as load\n",
    "from coscheduler.multi.train import _Memory\nload = _Memory(10, 4, 2).load\n",
])
def test_a_fifo_as_checkpoint_or_replay_memory_is_refused_at_once(tmp_path, code):
    fifo = tmp_path / "o.model.ckpt"
    os.mkfifo(fifo)
    prog = (code + "import sys\nfrom pathlib import Path\nfrom coscheduler.model import InvalidInput\n"
            "try:\n    load(Path(sys.argv[1]))\nexcept InvalidInput as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", prog, str(fifo)], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert f"{fifo}: not a regular file (a FIFO)" in r.stdout, r.stdout + r.stderr


# -- a trace named by a model's header -----------------------------------------------------------

@pytest.mark.parametrize("trace", [5, ["a"], "/etc/passwd", "../swf/lublin_256.swf", ""])
def test_models_gate_reads_only_a_bundled_trace_a_header_names(tmp_path, trace):
    from click.testing import CliRunner

    from coscheduler.cli.models import models
    from coscheduler.learned.modelfile import read_model_file, write_model_file
    from coscheduler.learned.registry import shipped
    _, header, params = read_model_file(shipped()[0])
    path = write_model_file({**header, "trace": trace}, params, tmp_path / "m.model")
    r = CliRunner().invoke(models, ["gate", str(path), "--no-write"])
    assert r.exit_code != 0 and isinstance(r.exception, (SystemExit, type(None))), repr(r.exception)
    assert f"error: {path}: " in r.output and ("is not bundled; give --trace" in r.output
                                               or "names no training trace" in r.output), r.output
