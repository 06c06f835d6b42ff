"""Every error class of the project survives a pickle round trip: its type, message and
fields. Errors cross processes (the sweep's worker pools, Dask and Ray rebuild them from
their pickle); a class whose ``__init__`` does not take its own ``args`` cannot be rebuilt,
which broke a whole process pool ("a worker process died") when a worker read a bad SWF
trace. The test walks the packages, so a new error class is checked without being listed.

The walk imports every module (JAX, Ray, Dask among them, which start threads): it runs in
a child process, so that this test process can still fork for the tests that need it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_WALK = r"""
import importlib, inspect, json, pickle, pkgutil, sys

PACKAGES = ("coscheduler", "monitoring", "slurm_plugin", "mesos_framework", "testbed")


def classes():
    found = {}
    for top in PACKAGES:
        pkg = importlib.import_module(top)
        for info in pkgutil.walk_packages(pkg.__path__, top + "."):
            if info.name.endswith("__main__"):
                continue    # (running it is what importing it does)
            mod = importlib.import_module(info.name)
            for cls in vars(mod).values():
                if inspect.isclass(cls) and issubclass(cls, BaseException) \
                        and cls.__module__ == mod.__name__:
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def placeholder(p):
    ann = str(p.annotation)
    if "BaseException" in ann or "Exception" in ann:
        return ValueError("the cause")
    if "Sequence" in ann or "list" in ann:
        return ["scontrol", "release", "12"]
    if "int" in ann and "str" not in ann:
        return 7
    if "bool" in ann:
        return True
    return f"the {p.name}"


def instance(cls):
    try:
        params = inspect.signature(cls).parameters.values()
    except ValueError:   # (no __init__ of its own: BaseException's)
        return cls("the message")
    args = [placeholder(p) for p in params
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not args and any(p.kind is p.VAR_POSITIONAL for p in params):
        args = ["the message"]
    return cls(*args)


failed = {}
found = classes()
for name, cls in found.items():
    try:
        err = instance(cls)
        back = pickle.loads(pickle.dumps(err))
        if type(back) is not cls:
            failed[name] = f"came back as {type(back).__name__}"
        elif str(back) != str(err):
            failed[name] = f"message {str(err)!r} came back as {str(back)!r}"
        elif {k: str(v) for k, v in vars(back).items()} != {k: str(v) for k, v in vars(err).items()}:
            failed[name] = f"fields {vars(err)} came back as {vars(back)}"
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"checked": sorted(found), "failed": failed}))
"""


def test_every_error_class_comes_back_whole_from_its_pickle():
    out = subprocess.run([sys.executable, "-c", _WALK], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    names = {n.rsplit(".", 1)[1] for n in result["checked"]}
    assert len(result["checked"]) > 40, "the walk lost the packages"
    assert {"SwfFormatError", "TaskFailed", "SlurmCommandError", "Refused", "AgentError"} <= names
    assert result["failed"] == {}
