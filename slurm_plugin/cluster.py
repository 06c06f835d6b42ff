"""A real Slurm cluster on this host: start and stop its daemons (``cosched slurm up/down``).

One private ``munged`` (own key and socket), one ``slurmctld`` and N ``slurmd -N NODE``
(Debian's Slurm has MULTIPLE_SLURMD), plus one coscheduler node agent per emulated node.
Everything a cluster uses comes from its folder and from ports chosen free at start, so
several clusters run side by side on one host (CI, other test runs, the Docker testbed):

- ports: slurmctld's and one per slurmd, probed free (outside the ephemeral range);
- names: cluster ``c<slurmctld port>``, nodes ``c<port>n1..nN``; Slurm names its cgroups
  ``slurm_<node>``, so no two live clusters share one;
- the agents' cgroup root ``cosched-slurm-<cluster>/<node>``;
- munge socket, state, spool, logs, pid files: below the folder.

``down`` ends exactly the processes ``up`` started, by pid (checked against each process's
start time, so a reused pid is never signalled), cancels the cluster's jobs first, kills
processes still in the cluster's own Slurm cgroups (a slurmstepd outlives slurmd), and
removes those cgroups and the agents' root. It is safe to run twice.

Configuration texts come from ``conf.py`` (pure); this module only does the I/O.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from coscheduler import boundedjson
from coscheduler.model import InvalidInput

from .commands import SlurmCommandError, SlurmCommands
from .conf import (ClusterConfig, NodeConfig, render_cgroup_conf, render_job_submit,
                   render_slurm_conf)
from .contract import read_jobs, read_nodes
from .parse import ParseError
from .daemons import (CGROUP_V1, Daemon, _cgroup_pids, _reap, _rmdir_tree,  # noqa: F401 - re-exported
                      _spawn, _stop, slurm_cgroups)
from .rest_daemon import JWT_KEY, write_jwt_key

log = logging.getLogger("slurm_plugin.cluster")

PACKAGES = ("slurm-wlm", "slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "scancel", "munged")
LUA_PLUGIN = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so")
STATE_FILE = "cluster.json"
STATE_VERSION = 1
AGENT_ROOT_PREFIX = "cosched-slurm-"


class ClusterError(RuntimeError):
    """The cluster could not be started, stopped or read; the message says why."""


def default_dir() -> Path:
    env = os.environ.get("COSCHED_SLURM_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/coscheduler/slurm")
    return Path.home() / ".local" / "state" / "coscheduler" / "slurm"


# -- packages ----------------------------------------------------------------------------------

def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def ensure_installed(say: Callable[[str], None] = print) -> list[str]:
    """Install Debian's Slurm and munge when a program is missing; return the packages
    installed ([] when nothing was needed)."""
    if not missing_binaries():
        return []
    if os.geteuid() != 0:
        raise ClusterError(f"Slurm is not installed (missing: {', '.join(missing_binaries())}) and "
                           "installing it needs root: run as root, or apt-get install "
                           + " ".join(PACKAGES))
    apt = shutil.which("apt-get")
    if apt is None:
        raise ClusterError("Slurm is not installed and there is no apt-get here: install "
                           f"{', '.join(PACKAGES)} (Slurm 22.05 or later) with your package manager")
    say(f"installing Debian packages {' '.join(PACKAGES)} (apt-get install --no-install-recommends)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = [apt, "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "--no-install-recommends",
           *PACKAGES]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0 and ("Unable to locate" in p.stderr or "has no installation candidate" in p.stderr):
        say("apt-get update (package lists are missing)")
        subprocess.run([apt, "-o", "DPkg::Lock::Timeout=300", "update", "-q"], capture_output=True,
                       text=True, env=env)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise ClusterError(f"apt-get install {' '.join(PACKAGES)} failed: {p.stderr.strip()[-800:]}")
    still = missing_binaries()
    if still:
        raise ClusterError(f"after installing {' '.join(PACKAGES)}, still missing: {', '.join(still)}")
    return list(PACKAGES)


# -- state ------------------------------------------------------------------------------------

@dataclass
class ClusterState:
    """What ``up`` started and where (``DIR/cluster.json``)."""

    dir: str
    name: str
    slurm_conf: str
    nodes: list[str]
    cpus: int
    partition: str
    default_partition: str
    agents: dict[str, str]
    agent_tokens: dict[str, str]
    agent_cgroup_root: str
    progress_dir: str
    usage_dir: str
    jobs_dir: str
    cpu_per_core: float
    controller_port: int
    node_ports: dict[str, int]
    daemons: list[Daemon] = field(default_factory=list)
    mesos_partition: str | None = None   # jobs there run on Mesos (docs/mesos.md)
    jwt_key: str | None = None           # AuthAltTypes=auth/jwt's key (slurmrestd, rest_daemon.py)
    created: float = 0.0
    stopped: float | None = None
    version: int = STATE_VERSION

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ClusterState":
        if data.get("version") != STATE_VERSION:
            raise ClusterError(f"cluster state version {data.get('version')!r} is not {STATE_VERSION}")
        data = dict(data)
        data["daemons"] = [Daemon(**d) for d in data.get("daemons", [])]
        return cls(**data)

    def summary(self) -> dict:
        """What ``cosched slurm up --json`` prints."""
        return {"slurm_conf": self.slurm_conf, "nodes": list(self.nodes), "agents": dict(self.agents),
                "state_dir": self.dir, "cluster": self.name, "partition": self.partition,
                "agent_tokens": dict(self.agent_tokens), "cpus_per_node": self.cpus,
                "cpu_per_core": self.cpu_per_core, "progress_dir": self.progress_dir}

    def commands(self, **kw) -> SlurmCommands:
        return SlurmCommands(self.slurm_conf, **kw)

    def daemon(self, role: str, name: str | None = None) -> Daemon | None:
        return next((d for d in self.daemons if d.role == role and (name is None or d.name == name)), None)


def load_state(directory: str | Path) -> ClusterState | None:
    path = Path(directory) / STATE_FILE
    try:
        data = boundedjson.load_file(path, what="JSON")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot read {path}: {exc}") from None
    try:
        return ClusterState.from_json(data)
    except (TypeError, KeyError) as exc:
        raise ClusterError(f"{path} is not a cluster state file: {exc}") from None


def save_state(state: ClusterState) -> None:
    path = Path(state.dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2))
    os.replace(tmp, path)


# -- ports and names ----------------------------------------------------------------------------

def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_ports(n: int, low: int = 20000, high: int = 32000, rng: random.Random | None = None) -> list[int]:
    """``n`` distinct ports that nothing listens on now, below the usual ephemeral range
    (so outgoing connections do not take them before the daemons bind)."""
    rng = rng or random.Random()
    out: list[int] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 2000:
            raise ClusterError(f"could not find {n} free ports in {low}-{high}")
        p = rng.randrange(low, high)
        if p not in out and _port_free(p):
            out.append(p)
    return out


# -- up ---------------------------------------------------------------------------------------

def _check_traversable(d: Path) -> None:
    """munged refuses a socket below a folder others cannot enter, and jobs of any user write
    their progress below the cluster's folder: every ancestor must be world-executable."""
    for parent in reversed(d.parents):
        if parent.exists() and not parent.stat().st_mode & 0o001:
            raise ClusterError(f"{parent} is not open to other users (mode "
                               f"{parent.stat().st_mode & 0o777:o}); munged and jobs of other "
                               f"users need every folder above {d} to be executable by all: "
                               "choose a folder elsewhere, or chmod o+x it")


def _wait(what: str, check: Callable[[], bool], timeout_s: float, poll_s: float = 0.2,
          detail: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except ParseError as exc:
            # An answer in a shape the contract does not know will not change by waiting.
            raise ClusterError(f"{what}: {exc}") from None
        except (SlurmCommandError, OSError):
            pass
        if time.monotonic() > deadline:
            extra = detail()
            raise ClusterError(f"{what} within {timeout_s:g} s" + (f": {extra}" if extra else ""))
        time.sleep(poll_s)


def _tail(path: str | Path, n: int = 5) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def up(directory: str | Path | None = None, *, nodes: int = 2, cpus: int = 4,
       name: str | None = None, partition: str = "cosched", default_partition: str = "batch",
       oversubscribe: int = 4, agent_interval_s: float = 0.5, real_cpus: float | None = None,
       install: bool = True, timeout_s: float = 60.0, mesos_partition: str | None = None,
       jwt: bool = False,
       say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> ClusterState:
    """Start a cluster in ``directory`` (see the module docstring). If one already runs
    there, its state is returned unchanged."""
    if os.geteuid() != 0:
        raise ClusterError("cosched slurm up needs root: slurmd runs jobs as their users and "
                           "the node agents write cgroups")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= 64:
        raise InvalidInput(f"--nodes must be an integer in 1..64, got {nodes!r}")
    if isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= 1024:
        raise InvalidInput(f"--cpus must be an integer in 1..1024, got {cpus!r}")
    d = Path(directory or default_dir()).expanduser().resolve()
    existing = load_state(d) if (d / STATE_FILE).exists() else None
    if existing is not None and existing.stopped is None:
        if all(x.alive() for x in existing.daemons):
            say(f"a cluster already runs in {d}")
            return existing
        say(f"a cluster in {d} is partly down: stopping what is left first")
        down(d, say=say)
    if install:
        ensure_installed(say)
    elif missing_binaries():
        raise ClusterError(f"Slurm is not installed (missing: {', '.join(missing_binaries())})")
    if not LUA_PLUGIN.exists() and not list(Path("/usr/lib").glob("*/slurm*/job_submit_lua.so")):
        raise ClusterError("Slurm's job_submit/lua plugin is missing (Debian: slurm-wlm-basic-plugins)")

    real = float(real_cpus) if real_cpus is not None else float(len(os.sched_getaffinity(0)))
    cpu_per_core = real / (nodes * cpus)
    name = _name_of_saved_state(d, name)
    for _ in range(20):
        ports = free_ports(nodes + 1)
        cname = name or f"c{ports[0]}"
        node_names = [f"{cname}n{i}" for i in range(1, nodes + 1)]
        agent_root = f"{AGENT_ROOT_PREFIX}{cname}"
        if name is not None or not any(slurm_cgroups(n) for n in node_names):
            break
    else:
        raise ClusterError("could not find a cluster name whose cgroups are not in use")
    if name is not None:
        busy = [str(p) for n in node_names for p in slurm_cgroups(n) if _cgroup_pids(p)]
        if busy:
            raise ClusterError(f"cluster name {name!r} is in use: processes live in {', '.join(busy)}")

    _check_traversable(d)
    paths = {k: d / k for k in ("munge", "state", "spool", "log", "run", "agents", "progress",
                                "usage", "jobs")}
    for k, p in paths.items():
        p.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    os.chmod(paths["munge"], 0o755)           # munged refuses a socket folder others can write
    for k in ("progress", "usage", "jobs"):
        os.chmod(paths[k], 0o1777)            # jobs of any user write progress and usage here
    config = ClusterConfig(
        cluster_name=cname, controller_host="localhost", controller_port=ports[0],
        nodes=tuple(NodeConfig(n, cpus, p) for n, p in zip(node_names, ports[1:])),
        state_dir=str(paths["state"]), spool_dir=str(paths["spool"]), log_dir=str(paths["log"]),
        run_dir=str(paths["run"]), jobcomp_file=str(paths["log"] / "jobcomp.txt"),
        munge_socket=str(paths["munge"] / "munge.socket"), partition=partition,
        default_partition=default_partition, oversubscribe=oversubscribe,
        cgroup_plugin="cgroup/v1" if Path("/sys/fs/cgroup/cpu").is_dir() else "autodetect",
        mesos_partition=mesos_partition, extra=write_jwt_key(d) if jwt else ())
    conf = d / "slurm.conf"
    conf.write_text(render_slurm_conf(config))
    (d / "cgroup.conf").write_text(render_cgroup_conf(config))
    (d / "job_submit.lua").write_text(render_job_submit(partition, (0,), mesos_partition=mesos_partition))

    state = ClusterState(
        dir=str(d), name=cname, slurm_conf=str(conf), nodes=node_names, cpus=cpus,
        partition=partition, default_partition=default_partition, mesos_partition=mesos_partition,
        agents={}, agent_tokens={}, jwt_key=str(d / JWT_KEY) if jwt else None,
        agent_cgroup_root=agent_root, progress_dir=str(paths["progress"]),
        usage_dir=str(paths["usage"]), jobs_dir=str(paths["jobs"]), cpu_per_core=cpu_per_core,
        controller_port=ports[0], node_ports=dict(zip(node_names, ports[1:])), created=time.time())
    save_state(state)
    try:
        _start_all(state, config, paths, agent_interval_s, timeout_s, say)
    except BaseException:
        say("start failed: stopping what was started")
        try:
            down(d, say=say)
        except Exception as exc:  # noqa: BLE001 - report the first error, not this one
            log.error("cleanup after a failed start: %s", exc)
        raise
    return state


def _start_all(state: ClusterState, config: ClusterConfig, paths: dict[str, Path],
               agent_interval_s: float, timeout_s: float, say: Callable[[str], None]) -> None:
    key = paths["munge"] / "munge.key"
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
    sock = config.munge_socket
    munged = shutil.which("munged") or "/usr/sbin/munged"
    state.daemons.append(_spawn("munged", "munged", [
        munged, "-F", "-S", sock, f"--key-file={key}", f"--pid-file={paths['munge'] / 'munged.pid'}",
        f"--log-file={paths['log'] / 'munged.log'}", f"--seed-file={paths['munge'] / 'munged.seed'}"],
        paths["log"] / "munged.out"))
    save_state(state)
    _wait("munged did not create its socket", lambda: Path(sock).exists(), 10,
          detail=lambda: _tail(paths["log"] / "munged.log") or _tail(paths["log"] / "munged.out"))

    cmds = state.commands(timeout_s=5, retries=0)
    env = cmds.env()
    ctld = shutil.which("slurmctld") or "/usr/sbin/slurmctld"
    state.daemons.append(_spawn("slurmctld", "slurmctld", [ctld, "-D", "-f", state.slurm_conf],
                                paths["log"] / "slurmctld.out", env))
    save_state(state)
    _wait("slurmctld did not answer `scontrol ping`",
          lambda: "UP" in cmds.run("scontrol", "ping", retry=False), timeout_s,
          detail=lambda: _tail(paths["log"] / "slurmctld.log") or _tail(paths["log"] / "slurmctld.out"))
    slurmd = shutil.which("slurmd") or "/usr/sbin/slurmd"
    for node in state.nodes:
        # SlurmdSpoolDir=.../spool/%n: slurmd makes its domain socket there but not the
        # folder ("Domain socket directory ...: No such file or directory" otherwise).
        (paths["spool"] / node).mkdir(parents=True, exist_ok=True)
        state.daemons.append(_spawn("slurmd", node, [slurmd, "-D", "-f", state.slurm_conf, "-N", node],
                                    paths["log"] / f"slurmd-{node}.out", env))
    save_state(state)

    def nodes_idle() -> bool:
        nodes = {n.name: n for n in read_nodes(cmds, retry=False)}
        return all(n in nodes and nodes[n].state == "IDLE" and nodes[n].usable for n in state.nodes)

    _wait(f"nodes {', '.join(state.nodes)} did not become idle", nodes_idle, timeout_s,
          detail=lambda: _tail(paths["log"] / f"slurmd-{state.nodes[0]}.log"))

    for node in state.nodes:
        adir = paths["agents"] / node
        adir.mkdir(parents=True, exist_ok=True)
        out = adir / "agent.json"
        out.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "coscheduler", "agent", "--listen", "127.0.0.1:0",
                "--cgroup-root", f"{state.agent_cgroup_root}/{node}",
                "--interval", f"{agent_interval_s:g}",
                "--node-cpus", f"{state.cpus * state.cpu_per_core:.6g}",
                "--cpu-per-core", f"{state.cpu_per_core:.6g}",
                "--state-dir", str(adir), "--progress-dir", state.progress_dir,
                "--discover-slurm", "--slurm-node", node, "--log-level", "WARNING"]
        state.daemons.append(_spawn("agent", node, argv, paths["log"] / f"agent-{node}.log",
                                    stdout=out))
        save_state(state)
    for node in state.nodes:
        out = paths["agents"] / node / "agent.json"

        def ready(out=out) -> bool:
            return out.exists() and out.read_text().strip().startswith("{")

        # 60 s: a Python agent starts in about a second, but at a load average of 50 it took
        # more than 30 s (seen with 26.05's Python 3.14 in a container)
        _wait(f"the node agent of {node} did not start", ready, 60,
              detail=lambda node=node: _tail(paths["log"] / f"agent-{node}.log"))
        info = json.loads(out.read_text().splitlines()[0])
        state.agents[node] = info["url"]
        state.agent_tokens[node] = info["token_file"]
    save_state(state)
    say(f"cluster {state.name} up: {len(state.nodes)} nodes x {state.cpus} CPUs "
        f"({state.cpu_per_core:.3g} real CPU per core), partition {state.partition}, "
        f"SLURM_CONF={state.slurm_conf}")


# -- down -------------------------------------------------------------------------------------

def _cancel_jobs(state: ClusterState, say: Callable[[str], None]) -> int:
    cmds = state.commands(timeout_s=5, retries=1)
    try:
        jobs = read_jobs(cmds)
    except (SlurmCommandError, ParseError) as exc:
        say(f"could not list jobs before stopping: {exc}")
        return 0
    live = [str(j.job_id) for j in jobs if not j.terminal]
    if not live:
        return 0
    try:
        cmds.run("scancel", *live)
    except SlurmCommandError as exc:
        say(f"scancel failed: {exc}")

    def none_running() -> bool:
        return not [j for j in read_jobs(cmds)
                    if j.state in ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")]

    try:
        _wait("jobs did not end", none_running, 15)
    except ClusterError as exc:
        say(f"{exc}; their processes are killed below")
    return len(live)


def _name_of_saved_state(d: Path, name: str | None) -> str | None:
    """The cluster name to start under in ``d``: a cluster started there before (and
    stopped) left its name in slurmctld's state folder, and slurmctld refuses to start
    under another one ("CLUSTER NAME MISMATCH"). The old name is taken again, which also
    keeps Slurm's job ids going up (a controller's records name jobs by id); a ``name``
    that differs is refused with what to do."""
    try:
        # "NAME" (22.05) or "NAME|ID" (24.11 and later: the cluster's id after the name)
        saved = (d / "state" / "clustername").read_text().strip().split("|", 1)[0]
    except OSError:
        return name
    if not saved or name in (None, saved):
        return name or saved or None
    raise ClusterError(f"{d}/state holds the state of Slurm cluster {saved!r}, started there "
                       f"before: start it again with --name {saved} (or without --name), or "
                       f"remove {d}/state to start cluster {name!r} afresh (its job ids then "
                       "start again from 1)")


def down(directory: str | Path | None = None, *,
         say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict:
    """Stop what ``up`` started in ``directory`` and remove the cluster's cgroups.
    Safe to run twice and on a partly started cluster."""
    d = Path(directory or default_dir()).expanduser().resolve()
    state = load_state(d)
    report: dict = {"state_dir": str(d), "cancelled_jobs": 0, "stopped": [], "killed": [],
                    "cgroups_removed": [], "cgroups_left": [], "already_stopped": False}
    if state is None:
        report["already_stopped"] = True
        return report
    alive = [x for x in state.daemons if x.alive()]
    ctld = state.daemon("slurmctld")
    if ctld is not None and ctld.alive():
        report["cancelled_jobs"] = _cancel_jobs(state, say)
    # Agents first (they give quotas back), then the node daemons, the controller, munge.
    order = {"agent": 0, "slurmd": 1, "slurmctld": 2, "munged": 3}
    for x in sorted(state.daemons, key=lambda x: order.get(x.role, 9)):
        what = _stop(x)
        if what != "not running":
            report["stopped" if what == "stopped" else "killed"].append(f"{x.role} {x.name} (pid {x.pid})")
    # Job processes and slurmstepd left in this cluster's own cgroups (named after its nodes).
    leftovers: set[int] = set()
    for node in state.nodes:
        for cg in slurm_cgroups(node):
            leftovers |= _cgroup_pids(cg)
    leftovers.discard(os.getpid())
    procs = []
    for pid in sorted(leftovers):
        try:
            p = psutil.Process(pid)
            p.kill()
            procs.append(p)
            report["killed"].append(f"pid {pid} ({p.name()}) left in the cluster's cgroups")
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
    for node in state.nodes:
        for cg in slurm_cgroups(node):
            (report["cgroups_removed"] if _rmdir_tree(cg) else report["cgroups_left"]).append(str(cg))
    for c in sorted(CGROUP_V1.iterdir()) if CGROUP_V1.is_dir() else []:
        root = c / state.agent_cgroup_root
        if root.is_dir():
            (report["cgroups_removed"] if _rmdir_tree(root) else report["cgroups_left"]).append(str(root))
    report["already_stopped"] = not alive and not report["killed"] and state.stopped is not None
    state.stopped = state.stopped or time.time()
    save_state(state)
    return report


def restart_daemon(state: ClusterState, role: str, name: str | None = None, *,
                   down_s: float = 0.0, timeout_s: float = 30.0) -> Daemon:
    """Stop one daemon ``up`` started (by pid), wait ``down_s``, start it again with the same
    command line. Used to show that a slurmctld restart loses no job."""
    if role not in ("slurmctld", "slurmd", "munged"):
        raise ClusterError(f"only slurmctld, slurmd and munged can be restarted, not {role}")
    d = state.daemon(role, name)
    if d is None:
        raise ClusterError(f"no {role} {name or ''} was started in {state.dir}".replace("  ", " "))
    _stop(d)
    if down_s > 0:
        time.sleep(down_s)
    env = state.commands().env() if role in ("slurmctld", "slurmd") else None
    new = _spawn(d.role, d.name, d.argv, Path(d.log), env)
    state.daemons[state.daemons.index(d)] = new
    save_state(state)
    if role == "slurmctld":
        cmds = state.commands(timeout_s=5, retries=0)
        _wait("slurmctld did not come back", lambda: "UP" in cmds.run("scontrol", "ping", retry=False),
              timeout_s)
    return new


def set_cpu_weight(state: ClusterState, shares: int | None) -> int | None:
    """Set the CPU weight (cgroup v1 ``cpu.shares``) of the cluster's agents' cgroup; return
    the previous value (None: no such cgroup). On a machine shared with other work, every
    runnable task there weighs as much as the whole emulated cluster, which can starve its
    nodes below their quotas; a dedicated node's weight (262144) lets the nodes get what
    their quotas allow, and never more. Only while the quotas that run leave the machine a
    CPU: at the whole machine's worth, slurmd, the agents and the controller starve (a
    slurmd ping took 63 s in CI). ``None`` restores the default (1024)."""
    f = CGROUP_V1 / "cpu" / state.agent_cgroup_root / "cpu.shares"
    if not f.exists():
        return None
    before = int(f.read_text().strip() or 1024)
    value = 1024 if shares is None else int(shares)
    if not 2 <= value <= 262144:
        raise InvalidInput(f"cpu.shares must lie in 2..262144, got {shares!r}")
    f.write_text(str(value))
    return before


# -- status -----------------------------------------------------------------------------------

def status(directory: str | Path | None = None) -> dict:
    """What runs in ``directory``: daemons, nodes as Slurm sees them, agents, job counts."""
    d = Path(directory or default_dir()).expanduser().resolve()
    state = load_state(d)
    if state is None:
        return {"state_dir": str(d), "exists": False, "running": False}
    daemons = [{"role": x.role, "name": x.name, "pid": x.pid, "alive": x.alive()} for x in state.daemons]
    out: dict = {"state_dir": str(d), "exists": True, "cluster": state.name,
                 "slurm_conf": state.slurm_conf, "partition": state.partition,
                 "running": bool(daemons) and all(x["alive"] for x in daemons) and state.stopped is None,
                 "stopped_at": state.stopped, "daemons": daemons, "nodes": {}, "agents": {},
                 "jobs": None}
    ctld = state.daemon("slurmctld")
    if ctld is not None and ctld.alive():
        cmds = state.commands(timeout_s=5, retries=1)
        try:
            for n in read_nodes(cmds):
                if n.name in state.nodes:
                    out["nodes"][n.name] = "+".join((n.state,) + n.flags)
            jobs = read_jobs(cmds)
            out["jobs"] = {s.lower(): sum(1 for j in jobs if j.state == s)
                           for s in ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")}
        except (SlurmCommandError, ParseError) as exc:
            out["error"] = str(exc)
    from monitoring.client import AgentClient
    for node, url in state.agents.items():
        agent = state.daemon("agent", node)
        healthy = False
        if agent is not None and agent.alive():
            c = AgentClient(url, timeout=2)
            healthy = c.health()
            c.close()
        out["agents"][node] = {"url": url, "healthy": healthy}
    return out


__all__ = ["ClusterError", "ClusterState", "Daemon", "default_dir", "down", "ensure_installed",
           "free_ports", "load_state", "missing_binaries", "restart_daemon", "set_cpu_weight", "status",
           "up"]
