"""The testbed's shape as plain data: its spec, and the docker-compose file made from it.

Pure functions (no Docker, no files): ``compose_config(spec)`` returns the compose file as
a dict; ``render`` turns it into YAML. ``testbed/docker-compose.yml`` is this output for the
default spec (a test keeps it in sync), for readers who want to see the cluster at a glance.

Every name the engine keeps carries the project prefix and the instance id
(``cosched-testbed-ID-...``): containers, the network, the volume, and the compose
project itself; every object is labelled ``cosched.testbed.instance=ID`` so that ``down``
finds all of them even when a start was interrupted half way. Nothing is published beyond
127.0.0.1: only the node agents' HTTP ports, for the host's ``status`` and for operators.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from coscheduler.model import InvalidInput
from monitoring.roles import check_guest_weight

DEFAULT_GUEST_WEIGHT = "100"

PREFIX = "cosched-testbed"
LABEL = "cosched.testbed"
AGENT_PORT = 9137                     # inside each node container
MESOS_PORT = 5050                     # the emulated Mesos master, inside its container
CONF_MOUNT = "/etc/cosched-testbed"   # the instance's config folder, read-only
RESULTS_MOUNT = "/results"            # the controller's results, the host's instance folder
SHARED_MOUNT = "/shared"              # the cluster's shared file system (a named volume)
CA_DIR = "/usr/local/share/ca-certificates"
CFS_PERIOD_US = 100_000
MAX_NODES = 32
_ID_RE = re.compile(r"^[a-z0-9]{1,12}\Z")


def check_instance_id(value: object) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise InvalidInput(f"testbed instance id {value!r} is not valid: use 1-12 lower-case "
                           "letters or digits")
    return value


@dataclass(frozen=True)
class TestbedSpec:
    """One testbed instance: ``nodes`` slurmd containers of ``cpus`` CPUs each as Slurm
    sees them, each held to ``cpu_limit`` real CPUs by its container's CPU quota."""

    __test__ = False   # not a pytest class despite its name

    instance: str
    nodes: int = 2
    cpus: int = 8
    cpu_limit: float = 1.0
    agent_ports: tuple[int, ...] = ()
    suite: str = "bookworm"
    tag: str = "latest"
    config_dir: str = "/etc/cosched-testbed"
    results_dir: str = "/var/lib/cosched-testbed/results"
    context_dir: str | None = None
    ca_dir: str | None = CA_DIR
    mem_mb: int = 4000
    labels: dict[str, str] = field(default_factory=dict)
    # The emulated Mesos master (testbed/mesos, not Mesos: no master can be installed
    # here), its agents as many and as large as the Slurm nodes, on 127.0.0.1:mesos_port.
    mesos: bool = False
    mesos_port: int | None = None
    # How the nodes' agents run guests (monitoring/roles.py): "idle", or a cpu.weight. Not
    # idle by default: an emulated node's jobs share its real CPU with no cpuset, so an idle
    # guest would wait behind every job of the node, not only behind its host as on a real
    # node (docs/testbed.md, seventh session).
    guest_weight: str = DEFAULT_GUEST_WEIGHT

    def __post_init__(self) -> None:
        check_instance_id(self.instance)
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or \
                not 1 <= self.nodes <= MAX_NODES:
            raise InvalidInput(f"nodes must be an integer in 1..{MAX_NODES}, got {self.nodes!r}")
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or not 1 <= self.cpus <= 1024:
            raise InvalidInput(f"cpus (per node, as Slurm sees them) must be an integer in "
                               f"1..1024, got {self.cpus!r}")
        if isinstance(self.cpu_limit, bool) or not isinstance(self.cpu_limit, (int, float)) or \
                not math.isfinite(self.cpu_limit) or not 0.01 <= self.cpu_limit <= 1024:
            raise InvalidInput(f"cpu limit (real CPUs per node container) must be a number in "
                               f"0.01..1024, got {self.cpu_limit!r}")
        if self.agent_ports:
            if len(self.agent_ports) != self.nodes:
                raise InvalidInput(f"agent ports: {len(self.agent_ports)} given for "
                                   f"{self.nodes} nodes")
            for p in self.agent_ports:
                if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
                    raise InvalidInput(f"agent port {p!r} is not a TCP port (1..65535)")
            if len(set(self.agent_ports)) != len(self.agent_ports):
                raise InvalidInput(f"agent ports repeat: {list(self.agent_ports)}")
        if self.mesos_port is not None and (isinstance(self.mesos_port, bool) or not isinstance(
                self.mesos_port, int) or not 1 <= self.mesos_port <= 65535
                or self.mesos_port in self.agent_ports):
            raise InvalidInput(f"mesos port {self.mesos_port!r} is not a free TCP port of its own")
        check_guest_weight(self.guest_weight)

    # -- names ----------------------------------------------------------------------------
    @property
    def project(self) -> str:
        return f"{PREFIX}-{self.instance}"

    @property
    def network(self) -> str:
        return f"{self.project}-net"

    @property
    def cgroup_parent(self) -> str:
        """The instance's own cgroup (made by Docker, under every controller's root), so
        the testbed competes for the host's CPUs with the weight of the CPUs it claims
        (``cpu_weight``), not as a single task, and ``down`` knows what to remove."""
        return self.project

    @property
    def cpu_weight(self) -> int:
        """cpu.shares of the instance's cgroup: 1024 (one busy task's weight) per real CPU
        its nodes may use, at least one."""
        return 1024 * max(1, math.ceil(self.nodes * self.cpu_limit - 1e-9))

    @property
    def volume(self) -> str:
        return f"{self.project}-shared"

    def container(self, service: str) -> str:
        return f"{self.project}-{service}"

    def node_names(self) -> list[str]:
        return [f"node{i + 1}" for i in range(self.nodes)]

    def services(self) -> list[str]:
        return ["slurmctld", *self.node_names(), "controller"] + (["mesos-master"] if self.mesos else [])

    @property
    def cpu_per_core(self) -> float:
        """Real CPU behind one of a node's CPUs as Slurm sees them."""
        return self.cpu_limit / self.cpus

    def as_json(self) -> dict:
        d = asdict(self)
        d["agent_ports"] = list(self.agent_ports)
        d["cpu_per_core"] = round(self.cpu_per_core, 6)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TestbedSpec":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["agent_ports"] = tuple(known.get("agent_ports") or ())
        return cls(**known)


def _labels(spec: TestbedSpec, role: str | None = None) -> dict[str, str]:
    out = {f"{LABEL}.instance": spec.instance, **spec.labels}
    if role:
        out[f"{LABEL}.role"] = role
    return out


def _common(spec: TestbedSpec, role: str, service: str, image: str) -> dict:
    volumes = [f"{spec.config_dir}:{CONF_MOUNT}:ro"]
    if spec.ca_dir:
        volumes.append(f"{spec.ca_dir}:{CA_DIR}:ro")
    svc: dict = {
        "image": image,
        "container_name": spec.container(service),
        "hostname": service,
        "init": True,        # tini reaps and forwards signals: `down` does not wait 10 s
        "cgroup_parent": spec.cgroup_parent,
        "command": [role],
        "labels": _labels(spec, role),
        "networks": {"cluster": {"aliases": [service]}},
        "volumes": volumes,
    }
    if spec.context_dir:
        svc["build"] = {"context": spec.context_dir, "target": role}
    return svc


HEALTH_BIN = "/usr/local/sbin/cosched-testbed-health"   # testbed/docker/health.sh


def _health(role: str, start_period: str = "90s") -> dict:
    # bash and scontrol only (no Python start-up): cheap enough to run every second.
    return {"test": ["CMD", HEALTH_BIN, role], "interval": "1s", "timeout": "10s",
            "retries": 30, "start_period": start_period}


def compose_config(spec: TestbedSpec) -> dict:
    """The compose file (format 2.4: CPU quotas and health-gated depends_on without swarm)."""
    tag = spec.tag
    services: dict[str, dict] = {}
    ctld = _common(spec, "slurmctld", "slurmctld", f"{PREFIX}-slurmctld:{tag}")
    ctld["healthcheck"] = _health("slurmctld")
    services["slurmctld"] = ctld
    for i, node in enumerate(spec.node_names()):
        svc = _common(spec, "node", node, f"{PREFIX}-node:{tag}")
        svc.update({
            # What --privileged would give, minus CAP_SYS_RESOURCE which this machine lacks
            # (runc cannot apply it); slurmd and the agent need to mount and write cgroups.
            "cap_add": ["ALL"],
            "cap_drop": ["SYS_RESOURCE"],
            "security_opt": ["seccomp=unconfined"],
            # The node's CPU capacity: a CFS quota (not `cpus:`, so that `docker update
            # --cpu-quota` can change it on a running node).
            "cpu_period": CFS_PERIOD_US,
            "cpu_quota": max(1000, round(spec.cpu_limit * CFS_PERIOD_US)),
            "environment": {
                "COSCHED_NODE": node,
                "COSCHED_NODE_CPUS": f"{spec.cpu_limit:g}",
                "COSCHED_CPU_PER_CORE": f"{spec.cpu_per_core:.6g}",
                "COSCHED_AGENT_PORT": str(AGENT_PORT),
                "COSCHED_GUEST_WEIGHT": str(spec.guest_weight),
            },
            "healthcheck": _health("node"),
        })
        svc["volumes"] = svc["volumes"] + [f"shared:{SHARED_MOUNT}"]
        if spec.agent_ports:
            svc["ports"] = [f"127.0.0.1:{spec.agent_ports[i]}:{AGENT_PORT}"]
        services[node] = svc
    ctl = _common(spec, "controller", "controller", f"{PREFIX}-controller:{tag}")
    ctl["volumes"] = ctl["volumes"] + [f"shared:{SHARED_MOUNT}",
                                       f"{spec.results_dir}:{RESULTS_MOUNT}"]
    ctl["healthcheck"] = _health("controller")
    services["controller"] = ctl
    if spec.mesos:
        mm = _common(spec, "mesos-master", "mesos-master", f"{PREFIX}-controller:{tag}")
        mm.pop("build", None)
        mm.update({
            # Its emulated agents run tasks as processes in cgroups below this container's.
            "cap_add": ["ALL"], "cap_drop": ["SYS_RESOURCE"], "security_opt": ["seccomp=unconfined"],
            "cpu_period": CFS_PERIOD_US,
            "cpu_quota": max(1000, round(spec.nodes * spec.cpu_limit * CFS_PERIOD_US)),
            "environment": {"COSCHED_MESOS_AGENTS": str(spec.nodes),
                            "COSCHED_MESOS_CPUS": str(spec.cpus),
                            "COSCHED_MESOS_CPU_SCALE": f"{spec.cpu_per_core:.6g}",
                            "COSCHED_MESOS_PORT": str(MESOS_PORT)},
            "healthcheck": _health("mesos-master"),
        })
        if spec.mesos_port:
            mm["ports"] = [f"127.0.0.1:{spec.mesos_port}:{MESOS_PORT}"]
        services["mesos-master"] = mm
    return {
        "version": "2.4",
        "services": services,
        "networks": {"cluster": {"name": spec.network, "driver": "bridge",
                                 "labels": _labels(spec)}},
        "volumes": {"shared": {"name": spec.volume, "labels": _labels(spec)}},
    }


def render(config: dict, header: str = "") -> str:
    """The compose dict as YAML (block style, keys in the order built)."""
    import yaml

    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100)
    return (header + body) if header else body


__all__ = ["AGENT_PORT", "CA_DIR", "CONF_MOUNT", "LABEL", "PREFIX", "RESULTS_MOUNT",
           "SHARED_MOUNT", "TestbedSpec", "check_instance_id", "compose_config", "render"]


def example_spec() -> TestbedSpec:
    """The default spec with placeholder paths: what testbed/docker-compose.yml shows."""
    return TestbedSpec(instance="example", agent_ports=(19137, 19138), tag="TAG",
                       config_dir="/var/lib/cosched-testbed/example/etc",
                       results_dir="/var/lib/cosched-testbed/example/results",
                       context_dir="/var/cache/cosched-testbed/context/bookworm")


EXAMPLE_HEADER = """\
# The testbed's compose file for the default shape (2 nodes x 8 CPUs, 1 real CPU each),
# as `cosched testbed up` writes it for each instance (instance id "example", image tag
# "TAG", agent ports 19137-19138 here). Generated: python -m testbed.compose > this file.
# Bring a testbed up with `cosched testbed up`, which builds the images, writes the
# instance's config folder and this file with its own names, and waits for health.
"""

if __name__ == "__main__":
    print(render(compose_config(example_spec()), EXAMPLE_HEADER), end="")
