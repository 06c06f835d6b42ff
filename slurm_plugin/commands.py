"""Running Slurm's command line: timeouts, retries with backoff, errors that say what failed.

Every Slurm command the project runs goes through ``SlurmCommands.run``. A command that
exits non-zero or times out raises ``SlurmCommandError`` (a ``BackendError``) naming the
command line, its exit status and its stderr. Failures that mean "the controller cannot be
reached right now" (slurmctld restarting, a socket timeout) are retried with exponential
backoff before giving up; an answer that is plainly final ("Invalid job id specified") is
not retried.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from coscheduler.backend import BackendError

log = logging.getLogger("slurm_plugin.commands")

# stderr of a Slurm client that could not talk to slurmctld (worth another try).
_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|Communication connection failure|Connection reset|"
    r"Transport endpoint|standby mode|Resource temporarily unavailable|"
    r"Unable to establish a connection|Slurm temporarily unable", re.I)


class SlurmCommandError(BackendError):
    """A Slurm command failed: ``argv``, ``returncode`` (None: timed out or not found),
    ``stderr``; ``transient`` says whether the controller was unreachable."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str,
                 transient: bool = False, note: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.transient = transient
        cmd = shlex.join(self.argv)
        how = note or (f"exit status {returncode}" if returncode is not None else "no answer")
        tail = self.stderr.splitlines()[-3:] if self.stderr else []
        detail = f": {' | '.join(tail)}" if tail else ""
        super().__init__(f"Slurm command `{cmd}` failed ({how}){detail}")


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
                p = subprocess.run(argv, capture_output=True, text=True, env=self.env(),
                                   timeout=timeout_s or self.timeout_s, input=input_text,
                                   stdin=None if input_text is not None else subprocess.DEVNULL)
            except subprocess.TimeoutExpired as exc:
                err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
                last = SlurmCommandError(shown, None, err, transient=True,
                                         note=f"timed out after {timeout_s or self.timeout_s:g} s")
                continue
            except OSError as exc:
                raise SlurmCommandError(shown, None, str(exc), note="could not be started") from None
            if p.returncode == 0:
                return p.stdout
            transient = bool(_TRANSIENT.search(p.stderr or ""))
            last = SlurmCommandError(shown, p.returncode, p.stderr or p.stdout, transient)
            if not transient:
                raise last
        assert last is not None
        raise last


__all__ = ["SlurmCommandError", "SlurmCommands"]
