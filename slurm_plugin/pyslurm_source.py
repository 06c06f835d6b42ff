"""The optional pyslurm adapter: the same ``SlurmSource`` interface over pyslurm's API.

Used only when ``import pyslurm`` works and pyslurm was built for the Slurm release that
runs (pyslurm refuses to build against another one; on Debian 12, whose Slurm is 22.05,
no pyslurm release builds at all, see docs/slurm.md). Reads go through ``pyslurm.Jobs``
and ``pyslurm.Nodes``; writes through ``pyslurm.Job(...).modify/release/hold/cancel``.
Everything is translated into the same ``SlurmJob``/``SlurmNode`` records the command
line gives, so the backend cannot tell the two apart.

What is tested here without pyslurm: the translation (``job_from_pyslurm``,
``node_from_pyslurm``) on objects carrying pyslurm's documented attribute names, and the
fallback to the command line when pyslurm is missing.
"""

from __future__ import annotations

from typing import Any

from .commands import SlurmCommands
from .parse import SlurmJob, SlurmNode, expand_hostlist, _states


def pyslurm_unavailable(commands: SlurmCommands | None = None) -> str | None:
    """None when pyslurm can be used, else why not."""
    try:
        import pyslurm  # noqa: F401
    except Exception as exc:  # ImportError, or a library built for another Slurm
        return f"import pyslurm failed: {exc}"
    version = getattr(pyslurm, "__version__", "")
    if commands is not None and version:
        try:
            running = commands.run("sinfo", "--version", retry=False).split()[-1]
        except Exception as exc:  # noqa: BLE001
            return f"cannot tell which Slurm runs: {exc}"
        if running.split(".")[:2] != version.split(".")[:2]:
            return f"pyslurm {version} was built for another Slurm than the running {running}"
    return None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    try:
        v = getattr(obj, name)
    except Exception:  # pyslurm raises for fields a release lacks
        return default
    return default if v is None else v


def _dependency_text(dep: Any) -> str:
    """pyslurm gives dependencies as a dict (``{"afterok": [7, "8(unfulfilled)"], ...}``);
    rebuild Slurm's text so ``parse.dependency_state`` reads both the same way."""
    if not dep:
        return ""
    if isinstance(dep, str):
        return dep
    parts = []
    for kind, jobs in dep.items():
        if kind in ("singleton", "satisfy") or not jobs:
            continue
        parts.append(f"{kind}:" + ":".join(str(j) for j in jobs))
    sep = "?" if dep.get("satisfy") == "any" else ","
    return sep.join(parts)


def job_from_pyslurm(j: Any) -> SlurmJob:
    state, flags = _states(_get(j, "state", ""))
    tl = _get(j, "time_limit")
    layout = None
    try:
        per_node = j.get_resource_layout_per_node()
    except Exception:  # noqa: BLE001 - not allocated yet, or not in this release
        per_node = None
    if per_node:
        from .parse import _count_ids
        layout = tuple((str(n), _count_ids(str(v.get("cpu_ids", "")))) for n, v in per_node.items())
    sharing = str(_get(j, "resource_sharing", "")).lower()
    reason = str(_get(j, "state_reason", ""))
    dep = _dependency_text(_get(j, "dependencies"))
    if reason == "DependencyNeverSatisfied" and "(failed)" not in dep:
        dep = (dep + "(failed)") if dep else "unknown(failed)"
    return SlurmJob(
        job_id=int(_get(j, "id")), name=str(_get(j, "name", "")), user=_get(j, "user_name"),
        partition=str(_get(j, "partition", "")), state=state, state_flags=flags, reason=reason,
        priority=_get(j, "priority"), nodes=expand_hostlist(_get(j, "allocated_nodes", "")),
        node_count=_get(j, "num_nodes"), max_nodes=_get(j, "max_nodes"), cpus=_get(j, "cpus"),
        time_limit_s=None if tl in (None, "UNLIMITED") else float(tl) * 60.0,
        submit_time=_get(j, "submit_time") or None, eligible_time=_get(j, "eligible_time") or None,
        start_time=_get(j, "start_time") or None, end_time=_get(j, "end_time") or None,
        comment=str(_get(j, "comment", "")), admin_comment=str(_get(j, "admin_comment", "")),
        dependency=dep,
        shared=True if sharing in ("yes", "oversubscribe", "force") else (None if sharing in ("", "ok") else False),
        required_nodes=expand_hostlist(_get(j, "required_nodes", "")),
        exit_code=_get(j, "exit_code"), exit_signal=_get(j, "exit_code_signal") or None,
        restarts=_get(j, "requeue_count", 0), cpus_by_node=layout,
        batch_host=str(_get(j, "batch_host", "")))


def node_from_pyslurm(n: Any) -> SlurmNode:
    state, flags = _states(str(_get(n, "state", "")).replace("+", " "))
    parts = _get(n, "partitions", ())
    if isinstance(parts, str):
        parts = [p for p in parts.split(",") if p]
    return SlurmNode(name=str(_get(n, "name")), cpus=int(_get(n, "total_cpus", 0) or _get(n, "cpus", 0)),
                     state=state, flags=flags, partitions=tuple(parts),
                     alloc_cpus=_get(n, "allocated_cpus"), reason=str(_get(n, "reason", "")))


class PyslurmSource:
    """``SlurmSource`` over pyslurm (reads and writes)."""

    name = "pyslurm"

    def __init__(self, commands: SlurmCommands):
        import pyslurm

        self._p = pyslurm
        self.cmd = commands  # for anything pyslurm lacks

    def jobs(self) -> list[SlurmJob]:
        return [job_from_pyslurm(j) for j in self._p.Jobs.load().values()]

    def nodes(self) -> list[SlurmNode]:
        return [node_from_pyslurm(n) for n in self._p.Nodes.load().values()]

    def layout(self, job_id: int):
        return job_from_pyslurm(self._p.Job.load(int(job_id))).cpus_by_node

    def update(self, job_id: int, **fields: str) -> None:
        names = {"NodeList": "required_nodes", "AdminComment": "admin_comment",
                 "OverSubscribe": "resource_sharing"}
        changes = {names.get(k, k.lower()): v for k, v in fields.items()}
        self._p.Job(int(job_id)).modify(self._p.JobSubmitDescription(**changes))

    def release(self, job_id: int) -> None:
        self._p.Job(int(job_id)).release()

    def hold(self, job_id: int) -> None:
        self._p.Job(int(job_id)).hold()

    def cancel(self, job_id: int) -> None:
        self._p.Job(int(job_id)).cancel()


__all__ = ["PyslurmSource", "job_from_pyslurm", "node_from_pyslurm", "pyslurm_unavailable"]
