"""The Docker engine the testbed runs on: find it, install it from Debian, start it.

The testbed needs the ``docker`` client, ``docker-compose`` (v1, Debian's 1.29) and a
running ``dockerd``. On a machine without them ``ensure_engine`` installs Debian's
``docker.io docker-compose debootstrap`` (as root, with apt-get) and says so; when the
daemon is not running it starts ``dockerd`` in the background (there is no systemd here)
and leaves it running afterwards: other users of the machine may use it too, and a second
``up`` then starts in seconds. The daemon is never stopped by the testbed.

Everything else talks to the engine through ``Engine.docker(...)`` and
``Engine.compose(...)``, which raise ``DockerError`` with the command and what it printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

APT_PACKAGES = ("docker.io", "docker-compose", "debootstrap")
DOCKERD_LOG = Path("/var/log/cosched-testbed-dockerd.log")
# Where the pid of a dockerd the testbed started is noted (status reports it).
DOCKERD_NOTE = Path("/run/cosched-testbed-dockerd.pid")
_START_TIMEOUT_S = 60.0

Say = Callable[[str], None]


class EngineUnavailable(RuntimeError):
    """No usable Docker engine, and it cannot be installed or started here (says why)."""


class DockerError(RuntimeError):
    """A docker or docker-compose command failed; the message holds its output."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(f"`{' '.join(self.argv[:6])}{' ...' if len(self.argv) > 6 else ''}` "
                         f"failed (exit {returncode}):\n{tail}")

    def __reduce__(self):
        return type(self), (self.argv, self.returncode, self.output)


@dataclass(frozen=True)
class Engine:
    """A reachable Docker engine and the two command-line clients."""

    docker_bin: str
    compose_bin: str
    server_version: str
    started_here: bool = False     # this call started dockerd
    installed_here: bool = False   # this call installed the packages

    def docker(self, *args: str, check: bool = True, timeout: float | None = None,
               input: bytes | None = None, capture: bool = True) -> subprocess.CompletedProcess:
        return _run([self.docker_bin, *args], check=check, timeout=timeout, input=input,
                    capture=capture)

    def compose(self, project: str, file: Path, *args: str, check: bool = True,
                timeout: float | None = None, capture: bool = True) -> subprocess.CompletedProcess:
        return _run([self.compose_bin, "--no-ansi", "-p", project, "-f", str(file), *args],
                    check=check, timeout=timeout, capture=capture)


def _run(argv: list[str], *, check: bool, timeout: float | None, input: bytes | None = None,
         capture: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, COMPOSE_INTERACTIVE_NO_CLI="1", DOCKER_CLI_HINTS="false")
    try:
        proc = subprocess.run(argv, input=input, timeout=timeout, env=env,
                              stdout=subprocess.PIPE if capture else None,
                              stderr=subprocess.STDOUT if capture else None)
    except FileNotFoundError:
        raise EngineUnavailable(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if capture else ""
        raise DockerError(argv, -1, f"timed out after {timeout:g} s\n{out}") from None
    if check and proc.returncode != 0:
        raise DockerError(argv, proc.returncode,
                          (proc.stdout or b"").decode(errors="replace") if capture else "")
    return proc


# -- finding, installing, starting ----------------------------------------------------------------

def missing_tools(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The engine's programs that are not on PATH (dockerd is looked for in sbin too)."""
    missing = []
    for tool in ("docker", "docker-compose", "dockerd"):
        if which(tool) is None and not (tool == "dockerd" and Path("/usr/sbin/dockerd").exists()):
            missing.append(tool)
    return missing


def server_version(docker_bin: str) -> tuple[str | None, str]:
    """(version, "") when the daemon answers, else (None, what the client said)."""
    try:
        proc = subprocess.run([docker_bin, "version", "--format", "{{.Server.Version}}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.decode().strip(), ""
    return None, (proc.stderr or proc.stdout).decode(errors="replace").strip()


def install_engine(say: Say) -> None:
    """apt-get install Debian's Docker engine, compose v1 and debootstrap (root only)."""
    if os.geteuid() != 0:
        raise EngineUnavailable(
            "no Docker engine here and installing one needs root: run as root, or install "
            f"{' '.join(APT_PACKAGES)} yourself")
    if shutil.which("apt-get") is None:
        raise EngineUnavailable(
            "no Docker engine here and no apt-get to install one (the testbed installs "
            f"Debian's {' '.join(APT_PACKAGES)}): install Docker and docker-compose yourself")
    say(f"installing the Docker engine from Debian ({' '.join(APT_PACKAGES)}); this takes "
        "about 20-60 s")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Another apt run (a colleague's, unattended upgrades) may hold the lock: wait for it.
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y",
               "--no-install-recommends", *APT_PACKAGES]
    first = subprocess.run(install, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if first.returncode != 0:
        # A fresh machine may have no package lists yet.
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        second = subprocess.run(install, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if second.returncode != 0:
            tail = "\n".join(second.stdout.decode(errors="replace").splitlines()[-8:])
            raise EngineUnavailable(f"could not install the Docker engine with apt-get:\n{tail}")


def start_dockerd(docker_bin: str, say: Say, timeout_s: float = _START_TIMEOUT_S) -> int:
    """Start dockerd in the background (its own session, log in DOCKERD_LOG); wait until it
    answers. Returns its pid."""
    if os.geteuid() != 0:
        raise EngineUnavailable("the Docker daemon is not running and starting it needs root")
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    say(f"starting the Docker daemon ({dockerd}, log {DOCKERD_LOG})")
    DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(DOCKERD_LOG, "ab") as log:
        proc = subprocess.Popen([dockerd], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        DOCKERD_NOTE.write_text(f"{proc.pid}\n")
    except OSError:
        pass
    deadline = time.monotonic() + timeout_s
    why = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = "\n".join(DOCKERD_LOG.read_text(errors="replace").splitlines()[-8:])
            raise EngineUnavailable(f"dockerd exited at start (exit {proc.returncode}); its log "
                                    f"{DOCKERD_LOG} ends with:\n{tail}")
        version, why = server_version(docker_bin)
        if version:
            return proc.pid
        time.sleep(0.3)
    raise EngineUnavailable(f"dockerd (pid {proc.pid}) did not answer within {timeout_s:g} s: "
                            f"{why}; see {DOCKERD_LOG}")


def ensure_engine(install: bool = True, start: bool = True, say: Say = lambda _m: None) -> Engine:
    """A reachable engine: installs it (``install``) and starts dockerd (``start``) when
    needed, saying what it does; else EngineUnavailable naming what is missing."""
    installed = started = False
    missing = missing_tools()
    if missing:
        if not install:
            raise EngineUnavailable(f"no Docker engine: {', '.join(missing)} not found on PATH")
        install_engine(say)
        installed = True
        missing = missing_tools()
        if missing:
            raise EngineUnavailable(f"installed {' '.join(APT_PACKAGES)} but {', '.join(missing)} "
                                    "is still not on PATH")
    docker_bin = shutil.which("docker") or "docker"
    compose_bin = shutil.which("docker-compose") or "docker-compose"
    version, why = server_version(docker_bin)
    if version is None:
        if "permission denied" in why.lower():
            raise EngineUnavailable(f"cannot reach the Docker daemon: {why} (run as root)")
        if not start:
            raise EngineUnavailable(f"the Docker daemon is not running: {why}")
        start_dockerd(docker_bin, say)
        started = True
        version, why = server_version(docker_bin)
        if version is None:
            raise EngineUnavailable(f"the Docker daemon does not answer: {why}")
    return Engine(docker_bin, compose_bin, version, started, installed)


def engine_status() -> dict:
    """What is installed and running, without changing anything (for ``status``)."""
    missing = missing_tools()
    docker_bin = shutil.which("docker")
    version, why = server_version(docker_bin) if docker_bin else (None, "docker not installed")
    started_pid = None
    try:
        pid = int(DOCKERD_NOTE.read_text().strip())
        if Path(f"/proc/{pid}").exists():
            started_pid = pid
    except (OSError, ValueError):
        pass
    return {"installed": not missing, "missing": missing, "running": version is not None,
            "server_version": version, "problem": None if version else why,
            "dockerd_started_by_testbed": started_pid}


__all__ = ["APT_PACKAGES", "DockerError", "Engine", "EngineUnavailable", "engine_status",
           "ensure_engine", "install_engine", "missing_tools", "server_version", "start_dockerd"]


def main(argv: list[str]) -> int:
    """``python -m testbed.engine ensure``: install and start the engine when missing (what
    testbed/test.sh runs before the tests, as root)."""
    import sys

    if argv != ["ensure"]:
        print("usage: python -m testbed.engine ensure", file=sys.stderr)
        return 2
    try:
        eng = ensure_engine(say=lambda m: print(f"testbed.engine: {m}", file=sys.stderr))
    except (EngineUnavailable, DockerError) as exc:
        print(f"testbed.engine: {exc}", file=sys.stderr)
        return 1
    print(f"testbed.engine: Docker {eng.server_version} ready"
          + (" (installed now)" if eng.installed_here else "")
          + (" (dockerd started now)" if eng.started_here else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
