"""Running Slurm's command line: timeouts, retries with backoff, errors that say what failed.

Every Slurm command the project runs goes through ``SlurmCommands.run``. A command that
exits non-zero or times out raises ``SlurmCommandError`` (a ``BackendError``) naming the
command line, its exit status and its stderr. Failures that mean "the controller cannot be
reached right now" (slurmctld restarting, a socket timeout) are retried with exponential
backoff before giving up; an answer that is plainly final ("Invalid job id specified") is
not retried.

A command's output is read as it comes, up to a cap (``max_output_bytes``; 1 GiB unless
``$COSCHED_SLURM_MAX_JSON_MB`` says otherwise): a command that prints more is killed and
named, never read whole into memory. Slurm 24.11's ``squeue --json`` prints about 9 KB a
job (tests/fixtures/slurm), so the default holds about 110,000 jobs; a site with more sets
the variable (slurmrestd's bodies, rest.py, share it).
"""

from __future__ import annotations

import logging
import os
import re
import selectors
import shlex
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

from coscheduler.backend import BackendError
from coscheduler.model import InvalidInput

log = logging.getLogger("slurm_plugin.commands")
R = TypeVar("R")

# stderr of a Slurm client that could not talk to slurmctld (worth another try).
_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|Communication connection failure|Connection reset|"
    r"Transport endpoint|standby mode|Resource temporarily unavailable|"
    r"Unable to establish a connection|Slurm temporarily unable", re.I)


MAX_OUTPUT_ENV = "COSCHED_SLURM_MAX_JSON_MB"
DEFAULT_MAX_OUTPUT_MB = 1024
_STDERR_KEEP = 64 << 10          # what an error message can use of stderr; the rest is dropped


def output_cap() -> int:
    """The cap on one answer of Slurm (a command's stdout, a slurmrestd body) in bytes:
    $COSCHED_SLURM_MAX_JSON_MB, else 1 GiB. InvalidInput names a bad value."""
    raw = os.environ.get(MAX_OUTPUT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_OUTPUT_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not 0 < mb < 1 << 30:
        raise InvalidInput(f"${MAX_OUTPUT_ENV}={raw[:40]!r}: expected a size in MB, above 0")
    return max(1, int(mb * (1 << 20)))


class _TooMuch(Exception):
    pass


def _capture(argv: list[str], env: dict[str, str], timeout_s: float, input_text: str | None,
             max_bytes: int, sink: Callable[[bytes], None] | None = None
             ) -> tuple[int, bytes, bytes]:
    """Run ``argv``; (exit status, stdout, the first 64 KB of stderr), reading both pipes as
    they fill. _TooMuch (the child killed) once stdout passes ``max_bytes``;
    subprocess.TimeoutExpired (killed) after ``timeout_s``. With ``sink``, stdout goes to it
    a piece at a time as it comes and only its last 64 KB is returned (for an error
    message); the time spent in ``sink`` does not count toward ``timeout_s``."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if input_text is not None:
        threading.Thread(target=_feed, args=(p.stdin, input_text.encode()), daemon=True).start()
    out: list[bytes] = []
    err: list[bytes] = []
    size = kept = 0
    deadline = time.monotonic() + timeout_s
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(p.stdout, selectors.EVENT_READ)
            sel.register(p.stderr, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout_s, stderr=b"".join(err))
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        sel.unregister(key.fileobj)
                    elif key.fileobj is p.stdout:
                        size += len(data)
                        if size > max_bytes:
                            raise _TooMuch()
                        if sink is None:
                            out.append(data)
                        else:
                            t0 = time.monotonic()
                            sink(data)
                            # the timeout bounds the command, not the reader's work
                            deadline += time.monotonic() - t0
                            out = [out[-1][-_STDERR_KEEP:], data] if out else [data]
                    elif kept < _STDERR_KEEP:
                        err.append(data[:_STDERR_KEEP - kept])
                        kept += len(err[-1])
        try:
            rc = p.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(argv, timeout_s, stderr=b"".join(err)) from None
        return rc, b"".join(out), b"".join(err)
    finally:
        if p.returncode is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:       # the command did not read it all: its answer says what went wrong
        pass


def _text(data: bytes) -> str:
    # Bytes that are not UTF-8 shown, not fatal. Only CR LF is a line end: a lone CR is a
    # character a user typed in a job's name or comment, and read as a line end it would
    # start a record of the user's choosing (parse.lines_of splits at LF only for that).
    text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n") if "\r" in text else text


class SlurmCommandError(BackendError):
    """A Slurm command failed: ``argv``, ``returncode`` (None: timed out or not found),
    ``stderr``; ``transient`` says whether the controller was unreachable."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str,
                 transient: bool = False, note: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.transient = transient
        self.note = note
        cmd = shlex.join(self.argv)
        how = note or (f"exit status {returncode}" if returncode is not None else "no answer")
        tail = self.stderr.splitlines()[-3:] if self.stderr else []
        detail = f": {' | '.join(tail)}" if tail else ""
        super().__init__(f"Slurm command `{cmd}` failed ({how}){detail}")

    def __reduce__(self):
        return type(self), (self.argv, self.returncode, self.stderr, self.transient, self.note)


@dataclass
class SlurmCommands:
    """Runs Slurm commands against one cluster (``slurm_conf``: its slurm.conf; None:
    the client's default). ``retries`` extra tries after a transient failure, waiting
    ``backoff_s * 3**k`` before try k+1; ``timeout_s`` per try."""

    slurm_conf: str | None = None
    timeout_s: float = 15.0
    retries: int = 3
    backoff_s: float = 0.2
    bin_dir: str | None = None
    sleep: Callable[[float], None] = time.sleep
    max_output_bytes: int = field(default_factory=output_cap)
    calls: int = field(default=0, init=False)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = str(self.slurm_conf)
        # A user's squeue/sinfo defaults must not change what we parse.
        for var in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SQUEUE_SORT", "SINFO_FORMAT",
                    "SQUEUE_STATES", "SLURM_TIME_FORMAT", "SQUEUE_PARTITION", "SINFO_PARTITION"):
            env.pop(var, None)
        return env

    def which(self, name: str) -> str:
        path = os.path.join(self.bin_dir, name) if self.bin_dir else shutil.which(name)
        if not path or not os.access(path, os.X_OK):
            raise SlurmCommandError([name], None, "",
                                    note=f"`{name}` is not installed (Debian: apt-get install slurm-client)")
        return path

    def run(self, name: str, *args: str, timeout_s: float | None = None,
            retry: bool = True, input_text: str | None = None) -> str:
        """Run ``name args...``; return its stdout. Raises SlurmCommandError."""
        out = self._attempts(name, args, timeout_s, retry, input_text, None)
        return _text(out)

    def stream(self, name: str, *args: str, reader: Callable[[], R],
               timeout_s: float | None = None, retry: bool = True) -> R:
        """Run ``name args...`` with its stdout fed, as it comes, to ``reader()``'s ``feed``
        (bytes); return the reader of the try that succeeded (a try that failed takes its
        reader with it, so a retried command is never read twice). For an answer too
        large to hold twice (``answerstream``). Raises SlurmCommandError."""
        made: list[R] = []

        def sink() -> Callable[[bytes], None]:
            made.append(reader())
            return made[-1].feed
        self._attempts(name, args, timeout_s, retry, None, sink)
        return made[-1]

    def _attempts(self, name: str, args: Sequence[str], timeout_s: float | None, retry: bool,
                  input_text: str | None, sink: Callable[[], Callable[[bytes], None]] | None
                  ) -> bytes:
        argv = [self.which(name), *map(str, args)]
        shown = [name, *map(str, args)]
        tries = 1 + (self.retries if retry else 0)
        last: SlurmCommandError | None = None
        for k in range(tries):
            if k:
                delay = self.backoff_s * 3 ** (k - 1)
                log.warning("%s; retrying in %.1f s", last, delay)
                self.sleep(delay)
            self.calls += 1
            try:
                rc, out, err = _capture(argv, self.env(), timeout_s or self.timeout_s, input_text,
                                        self.max_output_bytes, sink() if sink else None)
            except subprocess.TimeoutExpired as exc:
                last = SlurmCommandError(shown, None, _text(exc.stderr or b""), transient=True,
                                         note=f"timed out after {timeout_s or self.timeout_s:g} s")
                continue
            except _TooMuch:
                raise SlurmCommandError(
                    shown, None, "", note=f"printed more than {self.max_output_bytes} bytes and was "
                    f"stopped; a larger cluster: set ${MAX_OUTPUT_ENV}") from None
            except OSError as exc:
                raise SlurmCommandError(shown, None, str(exc), note="could not be started") from None
            if rc == 0:
                return out
            stderr = _text(err)
            transient = bool(_TRANSIENT.search(stderr))
            last = SlurmCommandError(shown, rc, stderr or _text(out[-_STDERR_KEEP:]), transient)
            if not transient:
                raise last
        assert last is not None
        raise last


__all__ = ["MAX_OUTPUT_ENV", "SlurmCommandError", "SlurmCommands", "output_cap"]
