"""Building a ``SlurmBackend`` for a cluster: the local one ``cosched slurm up`` made, or a
site's (slurm.conf + a description of its node agents).

A site describes its agents in a JSON file::

    {"nodes": {"node01": {"url": "http://node01:9137", "token_file": "/etc/cosched/agent.token"}, ...}}

or with a template for every node of the partition: ``{"url": "http://{node}:9137",
"token_file": "/etc/cosched/agent.token"}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from coscheduler import boundedjson
from coscheduler.model import InvalidInput

from .backend import SlurmBackend
from .cluster import ClusterState, default_dir, load_state
from .commands import SlurmCommands
from .conf import check_slurm_conf
from .source import make_source


def agent_clients(spec: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    from monitoring.client import AgentClient

    out = {}
    for node, a in spec.items():
        if not isinstance(a, Mapping) or not isinstance(a.get("url"), str):
            raise InvalidInput(f"agent of node {node!r}: needs a url")
        try:
            out[node] = AgentClient(a["url"], token_file=a.get("token_file"), timeout=5.0)
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"agent of node {node!r}: {exc}") from None
    return out


def read_agents_file(path: str | Path, nodes: list[str] | None = None) -> dict[str, dict]:
    try:
        data = boundedjson.load_file(path, max_bytes=64 << 20, max_depth=8, what="contents")
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"agents file {path}: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("nodes"), dict):
        return data["nodes"]
    if isinstance(data, dict) and isinstance(data.get("url"), str) and "{node}" in data["url"]:
        if not nodes:
            raise InvalidInput(f"agents file {path}: a url template needs the partition's nodes")
        return {n: {"url": data["url"].replace("{node}", n), "token_file": data.get("token_file")}
                for n in nodes}
    raise InvalidInput(f"agents file {path}: expected {{\"nodes\": {{NODE: {{\"url\", \"token_file\"}}}}}} "
                       "or {\"url\": \"http://{node}:9137\", \"token_file\": ...}")


def backend_for_cluster(state: ClusterState | str | Path, *, lease_s: float = 20.0,
                        source: str = "auto", timeout_s: float = 15.0) -> SlurmBackend:
    """The backend for a cluster started by ``cosched slurm up``."""
    if not isinstance(state, ClusterState):
        loaded = load_state(state)
        if loaded is None:
            raise InvalidInput(f"no cluster in {state}: start one with `cosched slurm up --dir {state}`")
        state = loaded
    cmds = SlurmCommands(state.slurm_conf, timeout_s=timeout_s)
    agents = agent_clients({n: {"url": u, "token_file": state.agent_tokens.get(n)}
                            for n, u in state.agents.items()})
    d = Path(state.dir)
    return SlurmBackend(make_source(cmds, source), partition=state.partition, agents=agents,
                        lease_s=lease_s, state_file=d / "backend-state.json",
                        jobcomp_file=d / "log" / "jobcomp.txt", usage_dir=state.usage_dir,
                        cpu_per_core=state.cpu_per_core)


def with_default_cluster(options: Mapping[str, Any]) -> Mapping[str, Any]:
    """Neither ``slurm_dir`` nor ``slurm_conf``: the cluster of `cosched slurm up` in its
    default folder."""
    if options.get("slurm_dir") or options.get("slurm_conf"):
        return options
    return {**options, "slurm_dir": str(default_dir())}


def backend_from_options(options: Mapping[str, Any]) -> SlurmBackend:
    """For ``cosched run --backend slurm``: ``slurm_dir`` (a local cluster), or
    ``slurm_conf`` + ``agents`` (a site's), plus ``partition``, ``lease_s``, ``state_file``."""
    lease = float(options.get("lease_s") or 20.0)
    options = with_default_cluster(options)
    if options.get("slurm_dir") and not options.get("slurm_conf"):
        b = backend_for_cluster(options["slurm_dir"], lease_s=lease,
                                source=options.get("slurm_source") or "auto")
        if options.get("partition"):
            b.partition = options["partition"]
        return b
    if options.get("slurm_conf"):
        check_slurm_conf(options["slurm_conf"])
    cmds = SlurmCommands(options.get("slurm_conf"))
    source = make_source(cmds, options.get("slurm_source") or "auto")
    partition = options.get("partition") or "cosched"
    agents: dict = {}
    if options.get("agents"):
        nodes = [n.name for n in source.nodes() if partition in n.partitions]
        agents = agent_clients(read_agents_file(options["agents"], nodes))
    state_file = options.get("state_file")
    if state_file is None and options.get("db"):
        state_file = str(Path(options["db"]).with_suffix(".slurm.json"))
    return SlurmBackend(source, partition=partition, agents=agents, lease_s=lease,
                        state_file=state_file, jobcomp_file=options.get("jobcomp_file"),
                        usage_dir=options.get("usage_dir"))


__all__ = ["agent_clients", "backend_for_cluster", "backend_from_options", "read_agents_file"]
