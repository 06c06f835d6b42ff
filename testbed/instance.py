"""A testbed instance on this machine: its folder, and bringing it up, down, and its status.

An instance is a compose project ``cosched-testbed-ID`` with its own folder
(``$COSCHED_TESTBED_HOME/ID``, by default ``/var/lib/cosched-testbed/ID`` as root):

    spec.json            what was asked (nodes, CPUs, CPU limit, ports, image tag)
    docker-compose.yml   the compose file made from it (testbed/compose.py)
    etc/                 read-only in every container: munge.key, agent.token, slurm/
    results/             the controller container's /results (runs write here)

``$COSCHED_TESTBED_HOME/current`` names the instance the commands use by default.

``up`` undoes everything it made when it fails or is interrupted (Ctrl-C); ``down``
removes the containers, the network and the volume of the instance by name and by label
(so it also cleans up after an interrupted ``up``), keeps the results (moved to
``$COSCHED_TESTBED_HOME/results/ID``), and is safe to run twice.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import shutil
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from coscheduler import boundedjson
from coscheduler.model import InvalidInput

from . import cgroups, images
from .compose import (AGENT_PORT, CA_DIR, CONF_MOUNT, DEFAULT_GUEST_WEIGHT, LABEL, TestbedSpec,
                      check_instance_id, compose_config, render)
from .engine import DockerError, Engine, EngineUnavailable, engine_status, ensure_engine
from .slurm_files import slurm_files

Say = Callable[[str], None]
HEALTH_TIMEOUT_S = 180.0


class TestbedError(RuntimeError):
    """A testbed command could not do what was asked; the message says what and why."""


def home() -> Path:
    env = os.environ.get("COSCHED_TESTBED_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/cosched-testbed")
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "cosched-testbed"


def instance_dir(instance: str) -> Path:
    return home() / check_instance_id(instance)


def current_instance() -> str | None:
    try:
        value = (home() / "current").read_text().strip()
    except OSError:
        return None
    try:
        return check_instance_id(value)
    except InvalidInput:
        return None


def resolve_instance(instance: str | None) -> str:
    """The instance a command acts on: the one given, else the current one."""
    if instance is not None:
        return check_instance_id(instance)
    cur = current_instance()
    if cur is None:
        raise TestbedError(f"no testbed is up (no {home() / 'current'}): run `cosched testbed up` "
                           "first, or give --instance ID")
    return cur


def list_instances() -> list[str]:
    try:
        return sorted(p.name for p in home().iterdir()
                      if p.is_dir() and (p / "spec.json").exists())
    except OSError:
        return []


def load_spec(instance: str) -> TestbedSpec:
    path = instance_dir(instance) / "spec.json"
    try:
        return TestbedSpec.from_json(boundedjson.load_file(path, what="JSON"))
    except FileNotFoundError:
        raise TestbedError(f"testbed {instance} does not exist ({path} is missing)") from None
    except (ValueError, TypeError, InvalidInput) as exc:
        raise TestbedError(f"{path} is not a valid testbed spec: {exc}") from None


@contextmanager
def locked(instance: str) -> Iterator[None]:
    """One command at a time per instance (up and down must not interleave)."""
    d = home()
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / f".{instance}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise TestbedError(f"another cosched testbed command is working on instance "
                                   f"{instance}; wait for it to finish") from None
            raise
        yield
    finally:
        os.close(fd)


# -- ports ----------------------------------------------------------------------------------------

def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (the kernel picks them)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def choose_ports(nodes: int, port_base: int | None) -> list[int]:
    """Agent ports: ``port_base .. port_base + nodes - 1`` (each checked free), or free ones."""
    if port_base is None:
        return free_ports(nodes)
    if isinstance(port_base, bool) or not isinstance(port_base, int) or \
            not 1024 <= port_base <= 65535 - nodes + 1:
        raise InvalidInput(f"--port-base must be an integer in 1024..{65535 - nodes + 1}, "
                           f"got {port_base!r}")
    ports = list(range(port_base, port_base + nodes))
    busy = [p for p in ports if not port_free(p)]
    if busy:
        raise TestbedError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use: the "
                           f"node agents need {port_base}..{port_base + nodes - 1}; free them or "
                           "give another --port-base (or none: free ports are picked)")
    return ports


# -- up -------------------------------------------------------------------------------------------

@dataclass
class UpResult:
    spec: TestbedSpec
    images: dict[str, str]
    seconds: float
    built: bool


def default_cpu_limit(nodes: int) -> float:
    """The host's CPUs shared evenly over the node containers, so that the nodes together
    never get more than the host has."""
    host = len(os.sched_getaffinity(0))
    return round(host / nodes, 3)


def write_instance(spec: TestbedSpec) -> Path:
    """The instance folder: spec, keys, Slurm files, compose file."""
    d = instance_dir(spec.instance)
    etc = d / "etc"
    (etc / "slurm").mkdir(parents=True, exist_ok=True)
    (d / "results").mkdir(exist_ok=True)
    key = etc / "munge.key"
    if not key.exists():
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
    token = etc / "agent.token"
    if not token.exists():
        token.write_text(secrets.token_urlsafe(32) + "\n")
        token.chmod(0o600)
    for name, text in slurm_files(spec).items():
        (etc / "slurm" / name).write_text(text)
    # The node agents as the Slurm backend reads them (slurm_plugin.connect's agents file),
    # plus what the runner needs to know of the nodes.
    token_file = f"{CONF_MOUNT}/agent.token"
    (etc / "cluster.json").write_text(json.dumps({
        "instance": spec.instance,
        "nodes": {n: {"url": f"http://{n}:{AGENT_PORT}", "token_file": token_file,
                      "cpus": spec.cpus} for n in spec.node_names()},
        "cpu_per_core": spec.cpu_per_core, "cpu_limit": spec.cpu_limit}, indent=2) + "\n")
    (d / "docker-compose.yml").write_text(render(
        compose_config(spec), f"# cosched testbed {spec.instance}: written by `cosched testbed up`\n"))
    (d / "spec.json").write_text(json.dumps(spec.as_json(), indent=2) + "\n")
    return d


def up(nodes: int = 2, cpus: int = 8, cpu_limit: float | None = None,
       port_base: int | None = None, suite: str = images.DEFAULT_SUITE, base: str = "auto",
       mirror: str | None = images.DEFAULT_MIRROR, install: bool = True, say: Say = lambda _m: None,
       health_timeout_s: float = HEALTH_TIMEOUT_S, instance: str | None = None,
       mesos: bool = False, guest_weight: str = DEFAULT_GUEST_WEIGHT) -> UpResult:
    """Bring a new instance up and wait until it is healthy. On any failure, or Ctrl-C, what
    was made is removed before the exception goes on."""
    t0 = time.monotonic()
    images.check_suite(suite)
    limit = default_cpu_limit(nodes) if cpu_limit is None else cpu_limit
    # Validate everything before touching the machine.
    TestbedSpec(instance="check", nodes=nodes, cpus=cpus, cpu_limit=limit,
                guest_weight=guest_weight)
    ports = choose_ports(nodes + (1 if mesos else 0), port_base)
    engine = ensure_engine(install=install, say=say)
    inst = instance or secrets.token_hex(3)
    check_instance_id(inst)
    if instance_dir(inst).exists():
        raise TestbedError(f"testbed instance {inst} already exists ({instance_dir(inst)})")
    made = False
    with locked(inst):
        try:
            had = set(_images(engine))
            imgs = images.build_images(engine, suite, base, mirror, say)
            built = not set(imgs.values()) <= had
            tag = imgs["node"].rsplit(":", 1)[1]
            d = instance_dir(inst)
            spec = TestbedSpec(
                instance=inst, nodes=nodes, cpus=cpus, cpu_limit=limit,
                agent_ports=tuple(ports[:nodes]), mesos=mesos,
                mesos_port=ports[nodes] if mesos else None,
                suite=suite, tag=tag, config_dir=str(d / "etc"), results_dir=str(d / "results"),
                context_dir=str(images.cache_dir() / "context" / tag),
                ca_dir=CA_DIR if Path(CA_DIR).is_dir() else None, guest_weight=guest_weight)
            made = True
            write_instance(spec)
            (home() / "current").write_text(inst + "\n")
            say(f"starting testbed {inst}: slurmctld, {nodes} node(s) of {cpus} CPUs "
                f"({limit:g} real CPU each), controller")
            cgroups.prepare(inst, spec.cpu_weight)
            try:
                engine.compose(spec.project, d / "docker-compose.yml", "up", "-d", "--no-build")
            except DockerError as exc:
                raise TestbedError(explain_up_failure(exc, spec)) from None
            wait_healthy(engine, spec, health_timeout_s, say)
            return UpResult(spec, imgs, time.monotonic() - t0, built)
        except BaseException as exc:
            if made:
                what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                say(f"up {what}: removing what it made")
                _down_locked(engine, inst, say=lambda _m: None)
            raise


def _images(engine: Engine) -> list[str]:
    out = engine.docker("images", "--format", "{{.Repository}}:{{.Tag}}", check=False)
    return out.stdout.decode().split()


def explain_up_failure(exc: DockerError, spec: TestbedSpec) -> str:
    text = exc.output
    low = text.lower()
    if "port is already allocated" in low or "address already in use" in low:
        return (f"a port the testbed publishes on 127.0.0.1 ({', '.join(map(str, spec.agent_ports))})"
                f" was taken meanwhile: run `cosched testbed up` again (free ports are picked), "
                f"or give another --port-base.\n{exc}")
    return f"docker-compose could not start the testbed:\n{exc}"


def container_health(engine: Engine, spec: TestbedSpec) -> dict[str, dict]:
    """service -> {state, health, exit_code} as Docker reports it."""
    names = [spec.container(s) for s in spec.services()]
    proc = engine.docker("inspect", "--format",
                         "{{.Name}}|{{.State.Status}}|{{if .State.Health}}{{.State.Health.Status}}"
                         "{{else}}none{{end}}|{{.State.ExitCode}}", *names, check=False)
    found = {}
    for line in proc.stdout.decode().splitlines():
        parts = line.strip().lstrip("/").split("|")
        if len(parts) == 4:
            found[parts[0]] = {"state": parts[1], "health": parts[2], "exit_code": int(parts[3])}
    return {s: found.get(spec.container(s), {"state": "missing", "health": "none", "exit_code": None})
            for s in spec.services()}


def last_health_output(engine: Engine, container: str) -> str:
    proc = engine.docker("inspect", "--format",
                         "{{if .State.Health}}{{range .State.Health.Log}}{{.Output}}{{end}}{{end}}",
                         container, check=False)
    lines = [ln for ln in proc.stdout.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def wait_healthy(engine: Engine, spec: TestbedSpec, timeout_s: float, say: Say) -> None:
    deadline = time.monotonic() + timeout_s
    shown = ""
    while True:
        health = container_health(engine, spec)
        dead = {s: h for s, h in health.items() if h["state"] in ("exited", "dead", "missing")}
        if dead:
            s, h = next(iter(dead.items()))
            logs = engine.docker("logs", "--tail", "15", spec.container(s), check=False)
            raise TestbedError(f"container {spec.container(s)} is {h['state']} (exit "
                               f"{h['exit_code']}); its last log lines:\n"
                               + logs.stdout.decode(errors="replace").rstrip())
        waiting = [s for s, h in health.items() if h["health"] not in ("healthy",)]
        line = ", ".join(f"{s} {health[s]['health']}" for s in waiting)
        if not waiting:
            say("all containers healthy")
            return
        if line != shown:
            say(f"waiting for health: {line}")
            shown = line
        if time.monotonic() > deadline:
            s = waiting[0]
            raise TestbedError(f"{spec.container(s)} not healthy after {timeout_s:g} s: "
                               f"{last_health_output(engine, spec.container(s)) or health[s]}")
        time.sleep(1.0)


# -- down -----------------------------------------------------------------------------------------

@dataclass
class DownResult:
    instance: str
    removed: dict[str, list[str]]
    results_kept: str | None


def down(instance: str | None = None, purge_images: bool = False,
         say: Say = lambda _m: None) -> DownResult:
    """Remove everything the instance made. Safe to run twice (the second finds nothing)."""
    inst = resolve_instance(instance)
    try:
        engine = ensure_engine(install=False, start=False)
    except EngineUnavailable:
        engine = None  # no engine: nothing of ours can be running; tidy the folder
    with locked(inst):
        result = _down_locked(engine, inst, say)
    if purge_images and engine is not None:
        result.removed["images"] = images.remove_images(engine, base_too=True)
    return result


def _down_locked(engine: Engine | None, inst: str, say: Say) -> DownResult:
    removed: dict[str, list[str]] = {"containers": [], "networks": [], "volumes": [],
                                     "cgroups": []}
    d = instance_dir(inst)
    project = f"cosched-testbed-{inst}"
    if engine is not None:
        label = f"label={LABEL}.instance={inst}"
        kinds = (("containers", ["ps", "-a", "--format", "{{.Names}}", "--filter", label],
                  ["rm", "-f", "-v"]),
                 ("networks", ["network", "ls", "--format", "{{.Name}}", "--filter", label],
                  ["network", "rm"]),
                 ("volumes", ["volume", "ls", "--format", "{{.Name}}", "--filter", label],
                  ["volume", "rm", "-f"]))
        before = {k: set(engine.docker(*ls, check=False).stdout.decode().split())
                  for k, ls, _ in kinds}
        # Containers named after the project but without our label (none today; cheap).
        before["containers"] |= set(_named_leftovers(engine, project))
        compose_file = d / "docker-compose.yml"
        if compose_file.exists():
            engine.compose(project, compose_file, "down", "-v", "--remove-orphans", "-t", "5",
                           check=False, timeout=180)
        for kind, ls, rm in kinds:
            left = set(engine.docker(*ls, check=False).stdout.decode().split())
            if kind == "containers":
                left |= set(_named_leftovers(engine, project))
            for obj in sorted(left):
                engine.docker(*rm, obj, check=False)
            still = set(engine.docker(*ls, check=False).stdout.decode().split())
            removed[kind] = sorted((before[kind] | left) - still)
            if still:
                say(f"could not remove {kind}: {', '.join(sorted(still))}")
    # The instance's cgroups (Docker removed the containers' own; the parent is ours).
    gone, busy = cgroups.remove(inst)
    removed["cgroups"] = gone
    if busy:
        say(f"cgroups still holding processes (left in place): {', '.join(busy)}")
    kept = None
    res = d / "results"
    if res.is_dir() and any(res.iterdir()):
        dest = home() / "results" / inst
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.move(str(res), str(dest))
        kept = str(dest)
    if d.exists():
        shutil.rmtree(d)
        say(f"removed {d}")
    if current_instance() == inst:
        (home() / "current").unlink(missing_ok=True)
    return DownResult(inst, removed, kept)


def _named_leftovers(engine: Engine, project: str) -> list[str]:
    out = engine.docker("ps", "-a", "--format", "{{.Names}}", "--filter", f"name={project}-",
                        check=False)
    return [n for n in out.stdout.decode().split() if n.startswith(project + "-")]


# -- status ---------------------------------------------------------------------------------------

def sinfo_nodes(text: str) -> list[dict]:
    """One entry per node from `sinfo -h -N -o "%N %T %c %P"`, which prints a node once per
    partition (every testbed node is in the default and the co-scheduling partition)."""
    nodes: dict[str, dict] = {}
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) < 4:
            continue
        name, state, cpus, partition = parts[:4]
        entry = nodes.setdefault(name, {"node": name, "state": state, "cpus": cpus,
                                        "partitions": []})
        entry["partitions"].append(partition.rstrip("*"))
    return list(nodes.values())


def status(instance: str | None = None) -> dict:
    """What runs, as plain data (``status --json`` prints it; docs/cli-json.md)."""
    eng = engine_status()
    inst = instance if instance is not None else current_instance()
    out: dict = {"instance": inst, "state": "down", "engine": eng, "spec": None,
                 "containers": {}, "slurm": None, "agents": {}, "instances": list_instances()}
    if inst is None or not (instance_dir(inst) / "spec.json").exists():
        return out
    spec = load_spec(inst)
    out["spec"] = spec.as_json()
    if not eng["running"]:
        out["state"] = "engine-down"
        return out
    engine = ensure_engine(install=False, start=False)
    health = container_health(engine, spec)
    out["containers"] = {s: {"name": spec.container(s), **h} for s, h in health.items()}
    healthy = all(h["health"] == "healthy" for h in health.values())
    running = [h for h in health.values() if h["state"] == "running"]
    out["state"] = "up" if healthy else ("degraded" if running else "down")
    if health["controller"]["state"] == "running":
        proc = engine.docker("exec", spec.container("controller"), "sinfo", "-h", "-N", "-o",
                             "%N %T %c %P", check=False, timeout=20)
        if proc.returncode == 0:
            out["slurm"] = {"nodes": sinfo_nodes(proc.stdout.decode())}
    for node, port in zip(spec.node_names(), spec.agent_ports):
        out["agents"][node] = {"url": f"http://127.0.0.1:{port}", "ok": _agent_ok(port)}
    if spec.mesos and spec.mesos_port:
        out["mesos_master"] = {"url": f"http://127.0.0.1:{spec.mesos_port}",
                               "ok": _agent_ok(spec.mesos_port, "/health"), "emulated": True}
    return out


def _agent_ok(port: int, path: str = "/healthz") -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


__all__ = ["DownResult", "TestbedError", "UpResult", "choose_ports", "current_instance", "down",
           "free_ports", "home", "instance_dir", "list_instances", "load_spec", "port_free",
           "resolve_instance", "status", "up", "wait_healthy", "write_instance"]
