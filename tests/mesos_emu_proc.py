"""The emulated Mesos master as its own process (`cosched mesos emulate`), for the framework's
integration tests, with a client for its documented admin (fault injection) API.

Only the documented surface is used: the command line, the JSON line it prints when ready
(url, admin_url, admin_token_file, agents), and POST /admin/... with the Bearer token
(testbed/mesos/README.md). The framework and the emulator share no code.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any


class EmulatorProcess:
    def __init__(self, agents: int = 2, cpus: float = 2, mem: float = 2048, *, heartbeat: float = 15.0,
                 allocation_interval: float = 1.0, status_update_retry: float = 1.0,
                 extra: tuple[str, ...] = ()):
        argv = [sys.executable, "-m", "coscheduler.cli", "mesos", "emulate", "--agents", str(agents),
                "--cpus", str(cpus), "--mem", str(mem), "--listen", "127.0.0.1:0",
                "--heartbeat", str(heartbeat), "--allocation-interval", str(allocation_interval),
                "--status-update-retry", str(status_update_retry), "--log-level", "WARNING", *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        line = b""
        deadline = time.monotonic() + 60
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("the emulator did not start: "
                                   + self.proc.stderr.read().decode(errors="replace")[-2000:])
            r, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if r:
                byte = os.read(self.proc.stdout.fileno(), 1)
                if not byte:
                    continue
                line += byte
        self.info: dict[str, Any] = json.loads(line)
        self.url: str = self.info["url"]
        self.admin_url: str = self.info["admin_url"]
        with open(self.info["admin_token_file"]) as f:
            self.token = f.readline().strip()
        self.agent_ids = [a["id"] for a in self.info["agents"]]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def admin(self, path: str, body: dict | None = None) -> Any:
        """POST /admin/PATH with the token (GET when ``body`` is None and path is state)."""
        url = f"{self.admin_url}/{path.lstrip('/')}"
        if body is None and path.strip("/") == "state":
            req = urllib.request.Request(url)
        else:
            req = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                data = r.read()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"admin {path} answered {e.code}: {e.read()[:300]!r}") from None
        return json.loads(data) if data.strip() else None

    def state(self) -> dict:
        return self.admin("state")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def wait_for(cond, timeout: float = 30.0, step: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
