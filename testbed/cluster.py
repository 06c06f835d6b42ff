"""A running testbed instance seen from the host: run commands in its containers (the
smoke's measurement in a node container)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .compose import TestbedSpec
from .engine import Engine, ensure_engine
from .instance import instance_dir, load_spec, resolve_instance

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

    def exec(self, service: str, *argv: str, check: bool = True, timeout: float | None = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        args = ["exec"]
        for k, v in (env or {}).items():
            args += ["-e", f"{k}={v}"]
        return self.engine.docker(*args, self.spec.container(service), *argv, check=check,
                                  timeout=timeout)

    def out(self, service: str, *argv: str, timeout: float | None = 120) -> str:
        return self.exec(service, *argv, timeout=timeout).stdout.decode(errors="replace")

    def measure(self, node: str, job_ids: list[str], seconds: float) -> dict:
        text = self.out(node, "/opt/cosched/bin/python", "-m", "testbed.measure", "--seconds",
                        f"{seconds:g}", *job_ids, timeout=seconds + 60)
        return json.loads(text)


__all__ = ["Cluster"]
