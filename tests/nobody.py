"""Run the command line as user nobody (uid 65534), for the errors an unprivileged user meets.

The project's interpreter and checkout may live under /root, which nobody cannot enter
(pyenv, a CI clone), so the CLI runs with the distribution's /usr/bin/python3.11 on a copy,
in a folder nobody can read, of the project's packages and of the three packages the
operator commands and the agent import (click, psutil, prometheus_client).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("click", "psutil", "prometheus_client")
PYTHON = "/usr/bin/python3.11"


class Nobody:
    def __init__(self) -> None:
        if os.geteuid() != 0 or not os.access(PYTHON, os.X_OK) or shutil.which("setpriv") is None:
            pytest.skip(f"needs root (to become nobody), {PYTHON} and setpriv")
        self.dir = Path(tempfile.mkdtemp(prefix="cosched-nobody-"))
        os.chmod(self.dir, 0o755)
        site = Path(sysconfig.get_paths()["purelib"])
        for name in ("coscheduler", "monitoring"):
            shutil.copytree(ROOT / name, self.dir / "py" / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        for name in PACKAGES:
            shutil.copytree(site / name, self.dir / "py" / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        for p in [self.dir, *self.dir.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)

    def scratch(self) -> Path:
        """A folder of root's that nobody may pass through (for paths to refuse inside)."""
        d = Path(tempfile.mkdtemp(prefix="scratch-", dir=self.dir))
        os.chmod(d, 0o755)
        return d

    def run(self, args: list[str], home: str = "/nonexistent") -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "PYTHONPATH": str(self.dir / "py"),
               "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PYTHON,
                               "-c", "from coscheduler.cli import main; main()", *args],
                              capture_output=True, text=True, env=env, timeout=60)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def nobody():
    n = Nobody()
    yield n
    n.close()
