"""Every error class of the project survives a pickle round trip: its type, message and
fields. Errors cross processes (the sweep's worker pools, Dask and Ray rebuild them from
their pickle); a class whose ``__init__`` does not take its own ``args`` cannot be rebuilt,
which broke a whole process pool ("a worker process died") when a worker read a bad SWF
trace. The test walks the packages, so a new error class is checked without being listed."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

PACKAGES = ("coscheduler", "monitoring", "slurm_plugin", "mesos_framework", "testbed")


def _error_classes() -> list[type]:
    found: dict[str, type] = {}
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
    return [found[k] for k in sorted(found)]


def _placeholder(p: inspect.Parameter):
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


def _instance(cls: type) -> BaseException:
    try:
        params = inspect.signature(cls).parameters.values()
    except ValueError:   # (no __init__ of its own: BaseException's)
        return cls("the message")
    args = [_placeholder(p) for p in params
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not args and any(p.kind is p.VAR_POSITIONAL for p in params):
        args = ["the message"]
    return cls(*args)


CLASSES = _error_classes()


def test_the_walk_finds_the_error_classes():
    names = {c.__name__ for c in CLASSES}
    assert len(CLASSES) > 40
    assert {"SwfFormatError", "TaskFailed", "SlurmCommandError", "Refused", "AgentError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_an_error_comes_back_whole_from_its_pickle(cls):
    err = _instance(cls)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err)
    assert {k: str(v) for k, v in vars(back).items()} == {k: str(v) for k, v in vars(err).items()}
