"""A running testbed instance seen from the host: run commands in its containers, talk to
its Slurm and its node agents."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .compose import TestbedSpec
from .engine import DockerError, Engine, ensure_engine
from .instance import TestbedError, instance_dir, load_spec, resolve_instance

_JOBID = re.compile(r"^(\d+)(;\S+)?$")


def parse_sbatch_parsable(text: str) -> str:
    """The job id from ``sbatch --parsable`` output (``123`` or ``123;cluster``)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    m = _JOBID.match(lines[-1]) if lines else None
    if m is None:
        raise TestbedError(f"could not make sense of sbatch output {text.strip()!r}")
    return m.group(1)


@dataclass
class Cluster:
    spec: TestbedSpec
    engine: Engine

    @classmethod
    def open(cls, instance: str | None = None) -> "Cluster":
        inst = resolve_instance(instance)
        return cls(load_spec(inst), ensure_engine(install=False, start=False))

    @property
    def folder(self) -> Path:
        return instance_dir(self.spec.instance)

    def token(self) -> str:
        return (self.folder / "etc" / "agent.token").read_text().strip()

    def exec(self, service: str, *argv: str, check: bool = True, timeout: float | None = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        args = ["exec"]
        for k, v in (env or {}).items():
            args += ["-e", f"{k}={v}"]
        return self.engine.docker(*args, self.spec.container(service), *argv, check=check,
                                  timeout=timeout)

    def out(self, service: str, *argv: str, timeout: float | None = 120) -> str:
        return self.exec(service, *argv, timeout=timeout).stdout.decode(errors="replace")

    def sbatch(self, *args: str) -> str:
        """Submit from the controller container; returns the Slurm job id."""
        try:
            text = self.out("controller", "sbatch", "--parsable", *args)
        except DockerError as exc:
            raise TestbedError(f"sbatch {' '.join(args)} failed: {exc.output.strip()}") from None
        return parse_sbatch_parsable(text)

    def job_state(self, job_id: str) -> str | None:
        proc = self.exec("controller", "squeue", "-h", "-j", job_id, "-o", "%T", check=False)
        state = proc.stdout.decode().strip()
        return state or None

    def scancel(self, *job_ids: str) -> None:
        if job_ids:
            self.exec("controller", "scancel", *job_ids, check=False)

    def agent(self, node: str):
        from monitoring.client import AgentClient

        port = self.spec.agent_ports[self.spec.node_names().index(node)]
        return AgentClient(f"http://127.0.0.1:{port}", token=self.token())

    def measure(self, node: str, job_ids: list[str], seconds: float) -> dict:
        text = self.out(node, "/opt/cosched/bin/python", "-m", "testbed.measure", "--seconds",
                        f"{seconds:g}", *job_ids, timeout=seconds + 60)
        return json.loads(text)


__all__ = ["Cluster", "parse_sbatch_parsable"]
