"""slurm.conf, cgroup.conf and job_submit.lua as pure functions of a cluster's description.

Nothing here starts a daemon or touches a file: ``ClusterConfig`` (node names, hosts,
ports, CPUs, paths) goes in, text comes out. ``cosched slurm up`` (``cluster.py``) writes
the texts and starts the daemons on one host; the Docker Compose testbed renders the same
texts with one slurmd per container (``NodeConfig.hostname``/``address`` per container,
``proctrack``/``task`` plugins that need no cgroup privileges).

What the generated slurm.conf sets up for co-scheduling (docs/slurm.md explains each line
a site adds to its own slurm.conf):

- ``SelectType=select/cons_tres`` with ``CR_Core``: cores are the unit that is shared;
- a normal default partition, and the co-scheduling partition with
  ``OverSubscribe=YES:N`` on the same nodes (only jobs in it may share cores);
- ``JobSubmitPlugins=lua``: the project's ``job_submit.lua`` next to slurm.conf;
- ``ProctrackType=proctrack/cgroup`` + ``TaskPlugin=task/cgroup`` +
  ``JobAcctGatherType=jobacct_gather/cgroup``: every process of a job lands in the job's
  cgroups (cpuacct included), where the node agent finds and follows it;
- ``JobCompType=jobcomp/filetxt``: one line per finished job (no slurmdbd needed);
- ``SchedulerParameters=bf_interval=1``: a released guest starts within about a second
  (the main scheduler leaves jobs that must share cores to the backfill pass);
- ``MinJobAge``: finished jobs stay visible long enough for the backend to read them.

Several nodes on one host work because Debian builds Slurm with MULTIPLE_SLURMD:
``slurmd -N NAME`` with one ``Port`` per node; ``SlurmdParameters=config_overrides``
lets an emulated node claim more CPUs than the host has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from coscheduler import boundedjson
from coscheduler.model import InvalidInput
from coscheduler.resources import resource

LUA_TEMPLATE = resource(__package__, "job_submit.lua")   # package data (pyproject.toml)
_SLURM_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z")
_NODE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}\Z")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}\Z")


# A site's slurm.conf is a few KB; includes aside, none is near this.
MAX_SLURM_CONF_BYTES = 16 << 20


def check_slurm_conf(path: str | Path) -> None:
    """InvalidInput naming ``path`` unless it is a slurm.conf the Slurm commands can be
    pointed at: a regular, readable UTF-8 text file with key=value lines. (Pointed at a
    FIFO, /dev/zero or an empty file, every command failed at every pass and ``cosched
    run`` went on as if connected.)"""
    what = f"slurm.conf {str(path)[:200]}"
    try:
        raw = boundedjson.read_file(path, MAX_SLURM_CONF_BYTES, what)
    except FileNotFoundError:
        raise InvalidInput(f"{what}: no such file") from None
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not any("=" in line for line in text.splitlines() if not line.lstrip().startswith("#")):
        raise InvalidInput(f"{what}: no key=value line in it (is it a slurm.conf?)")


def _port(p: int, what: str) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
        raise InvalidInput(f"{what} must be a port number in 1..65535, got {p!r}")
    return p


def _path(p: str | Path, what: str) -> str:
    text = str(p)
    if not text.startswith("/") or any(c in text for c in " \t\n\"'#"):
        raise InvalidInput(f"{what} must be an absolute path without spaces, quotes or '#', got {text!r}")
    return text


@dataclass(frozen=True)
class NodeConfig:
    """One slurmd: its Slurm node name, where it runs, its port and CPUs."""

    name: str
    cpus: int
    port: int
    hostname: str = "localhost"
    address: str | None = None
    real_memory_mb: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NODE_NAME.match(self.name):
            raise InvalidInput(f"node name {self.name!r} is not valid: a letter, then letters, "
                               "digits, '_' or '-' (at most 64)")
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or not 1 <= self.cpus <= 4096:
            raise InvalidInput(f"node {self.name}: cpus must be an integer in 1..4096, got {self.cpus!r}")
        _port(self.port, f"node {self.name}: port")
        for what, host in (("hostname", self.hostname), ("address", self.address)):
            if host is not None and (not isinstance(host, str) or not _HOST.match(host)):
                raise InvalidInput(f"node {self.name}: {what} {host!r} is not a host name or address")
        if isinstance(self.real_memory_mb, bool) or not isinstance(self.real_memory_mb, int) \
                or self.real_memory_mb < 1:
            raise InvalidInput(f"node {self.name}: real_memory_mb must be an integer >= 1")


@dataclass(frozen=True)
class ClusterConfig:
    """Everything the three configuration files depend on."""

    cluster_name: str
    controller_host: str
    controller_port: int
    nodes: tuple[NodeConfig, ...]
    state_dir: str                 # StateSaveLocation
    spool_dir: str                 # SlurmdSpoolDir (gets /%n)
    log_dir: str
    run_dir: str                   # pid files
    jobcomp_file: str
    munge_socket: str | None = None
    controller_address: str | None = None
    partition: str = "cosched"
    default_partition: str = "batch"
    oversubscribe: int = 4
    slurm_user: str = "root"
    proctrack: str = "proctrack/cgroup"
    task_plugin: str = "task/cgroup"
    jobacct_gather: str = "jobacct_gather/cgroup"
    cgroup_plugin: str = "cgroup/v1"
    slurmd_timeout_s: int = 30
    min_job_age_s: int = 600
    extra: tuple[str, ...] = field(default_factory=tuple)
    # A partition whose jobs run on Mesos (docs/mesos.md): FUTURE nodes that no slurmd
    # serves, so Slurm never runs its jobs; None: no such partition.
    mesos_partition: str | None = None
    mesos_nodes: int = 4
    mesos_cpus: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.cluster_name, str) or not _SLURM_NAME.match(self.cluster_name):
            raise InvalidInput(f"cluster name {self.cluster_name!r} is not valid: a lower-case "
                               "letter, then lower-case letters, digits, '_' or '-' (at most 40)")
        for what in ("partition", "default_partition"):
            v = getattr(self, what)
            if not isinstance(v, str) or not _NODE_NAME.match(v):
                raise InvalidInput(f"{what} {v!r} is not a valid partition name")
        if self.partition == self.default_partition:
            raise InvalidInput("the co-scheduling partition must differ from the default one")
        if self.mesos_partition is not None and (
                not isinstance(self.mesos_partition, str) or not _NODE_NAME.match(self.mesos_partition)
                or self.mesos_partition in (self.partition, self.default_partition)):
            raise InvalidInput(f"Mesos partition {self.mesos_partition!r} must be a valid partition "
                               "name, different from the others")
        for what in ("mesos_nodes", "mesos_cpus"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
                raise InvalidInput(f"{what} must be an integer in 1..4096, got {v!r}")
        if not self.nodes:
            raise InvalidInput("a cluster needs at least one node")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise InvalidInput(f"node names repeat: {names}")
        _port(self.controller_port, "controller port")
        ports = [(n.hostname, n.port) for n in self.nodes]
        if len(set(ports)) != len(ports) or any(
                h == self.controller_host and p == self.controller_port for h, p in ports):
            raise InvalidInput("every slurmd on a host needs its own port, different from slurmctld's")
        if not _HOST.match(self.controller_host):
            raise InvalidInput(f"controller host {self.controller_host!r} is not a host name")
        for what in ("state_dir", "spool_dir", "log_dir", "run_dir", "jobcomp_file"):
            _path(getattr(self, what), what)
        if self.munge_socket is not None:
            _path(self.munge_socket, "munge socket")
            if len(self.munge_socket) > 100:
                raise InvalidInput(f"munge socket path is {len(self.munge_socket)} characters; "
                                   "Unix sockets allow about 100: choose a shorter folder")
        if isinstance(self.oversubscribe, bool) or not isinstance(self.oversubscribe, int) \
                or not 2 <= self.oversubscribe <= 64:
            raise InvalidInput(f"oversubscribe must be an integer in 2..64, got {self.oversubscribe!r}")
        for line in self.extra:
            if "\n" in line:
                raise InvalidInput(f"extra slurm.conf line {line!r} contains a newline")

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]


def render_slurm_conf(c: ClusterConfig) -> str:
    """slurm.conf for ``c`` (one NodeName line per node: ports differ)."""
    host = c.controller_host + (f"({c.controller_address})" if c.controller_address else "")
    lines = [
        "# Written by coscheduler (slurm_plugin/conf.py); docs/slurm.md explains each setting.",
        f"ClusterName={c.cluster_name}",
        f"SlurmctldHost={host}",
        f"SlurmctldPort={c.controller_port}",
        f"SlurmUser={c.slurm_user}",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
    ]
    if c.munge_socket:
        lines.append(f"AuthInfo=socket={c.munge_socket}")
    lines += [
        f"StateSaveLocation={c.state_dir}",
        f"SlurmdSpoolDir={c.spool_dir}/%n",
        f"SlurmctldPidFile={c.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={c.run_dir}/slurmd-%n.pid",
        f"SlurmctldLogFile={c.log_dir}/slurmctld.log",
        f"SlurmdLogFile={c.log_dir}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"ProctrackType={c.proctrack}",
        f"TaskPlugin={c.task_plugin}",
        f"JobAcctGatherType={c.jobacct_gather}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1",
        "JobSubmitPlugins=lua",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={c.jobcomp_file}",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        f"SlurmdTimeout={c.slurmd_timeout_s}",
        f"MinJobAge={c.min_job_age_s}",
        "KillWait=5",
        "MpiDefault=none",
        "DependencyParameters=kill_invalid_depend",
    ]
    lines += list(c.extra)
    for n in c.nodes:
        addr = f" NodeAddr={n.address}" if n.address else ""
        lines.append(f"NodeName={n.name} NodeHostname={n.hostname}{addr} Port={n.port} "
                     f"CPUs={n.cpus} RealMemory={n.real_memory_mb} State=UNKNOWN")
    nodes = ",".join(c.node_names)
    lines.append(f"PartitionName={c.default_partition} Nodes={nodes} Default=YES "
                 "MaxTime=INFINITE State=UP")
    lines.append(f"PartitionName={c.partition} Nodes={nodes} OverSubscribe=YES:{c.oversubscribe} "
                 "MaxTime=INFINITE State=UP")
    if c.mesos_partition is not None:
        # Stand-ins for the Mesos agents: FUTURE nodes have no slurmd; Slurm holds the
        # partition's jobs (the submit hook marks them) and the Mesos framework runs them.
        m = f"{c.cluster_name}m[1-{c.mesos_nodes}]" if c.mesos_nodes > 1 else f"{c.cluster_name}m1"
        lines.append(f"NodeName={m} NodeHostname=localhost CPUs={c.mesos_cpus} RealMemory=1000 "
                     "State=FUTURE")
        lines.append(f"PartitionName={c.mesos_partition} Nodes={m} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def render_cgroup_conf(c: ClusterConfig) -> str:
    """cgroup.conf: Slurm's cgroups track processes; cores are not confined with a cpuset
    (emulated nodes claim CPUs the host does not have), CPU time is limited by the node
    agent's own cgroups instead."""
    return "\n".join([
        "# Written by coscheduler (slurm_plugin/conf.py).",
        f"CgroupPlugin={c.cgroup_plugin}",
        "ConstrainCores=no",
        "ConstrainRAMSpace=no",
        "ConstrainDevices=no",
    ]) + "\n"


def render_job_submit(partition: str = "cosched", admin_uids: tuple[int, ...] = (0,),
                      template: str | None = None, mesos_partition: str | None = None) -> str:
    """job_submit.lua with the site's partition names and admin uids filled in
    (``mesos_partition``: jobs there run on Mesos, docs/mesos.md; None: no such partition)."""
    if not isinstance(partition, str) or not _NODE_NAME.match(partition):
        raise InvalidInput(f"partition {partition!r} is not a valid partition name")
    if mesos_partition is not None and (not isinstance(mesos_partition, str)
                                        or not _NODE_NAME.match(mesos_partition)
                                        or mesos_partition == partition):
        raise InvalidInput(f"Mesos partition {mesos_partition!r} is not a valid partition name "
                           f"different from {partition!r}")
    uids = sorted({int(u) for u in admin_uids})
    if not uids or any(u < 0 for u in uids):
        raise InvalidInput(f"admin uids must be integers >= 0, got {admin_uids!r}")
    text = LUA_TEMPLATE.read_text() if template is None else template
    out, n1 = re.subn(r'(?m)^local COSCHED_PARTITION = ".*"$',
                      f'local COSCHED_PARTITION = "{partition}"', text)
    table = ", ".join(f"[{u}] = true" for u in uids)
    out, n2 = re.subn(r"(?m)^local ADMIN_UIDS = \{.*\}$", f"local ADMIN_UIDS = {{ {table} }}", out)
    if n1 != 1 or n2 != 1:
        raise InvalidInput("job_submit.lua template lacks its COSCHED_PARTITION/ADMIN_UIDS lines")
    if mesos_partition is not None:
        out, n3 = re.subn(r'(?m)^local MESOS_PARTITION = ".*"$',
                          f'local MESOS_PARTITION = "{mesos_partition}"', out)
        if n3 != 1:
            raise InvalidInput("job_submit.lua template lacks its MESOS_PARTITION line")
    return out


__all__ = ["ClusterConfig", "NodeConfig", "render_cgroup_conf", "render_job_submit",
           "render_slurm_conf"]
