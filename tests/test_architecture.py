"""One direction of dependence: the core (coscheduler/) never imports a body, and a body
plugs in through an entry point alone (docs/architecture.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import coscheduler

BODIES = ("slurm_plugin", "mesos_framework", "testbed", "monitoring")

# Imports every module of the core in a fresh interpreter and prints which body modules
# got loaded (a module that cannot be imported here is reported, never skipped silently).
_IMPORT_ALL = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    import coscheduler
    bodies = {bodies!r}
    failed, count = {{}}, 0
    for info in pkgutil.walk_packages(coscheduler.__path__, "coscheduler."):
        if info.name.endswith(".__main__"):   # running it would start the command line
            continue
        try:
            importlib.import_module(info.name)
            count += 1
        except Exception as exc:
            failed[info.name] = repr(exc)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in bodies)
    print(json.dumps({{"loaded": loaded, "failed": failed, "count": count}}))
""")


def _run(code: str, *extra_path: Path) -> dict:
    env_path = [str(p) for p in extra_path]
    prog = f"import sys; sys.path[:0] = {env_path!r}\n" + code
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_core_imports_no_body():
    got = _run(_IMPORT_ALL.format(bodies=BODIES))
    assert got["failed"] == {}
    assert got["count"] > 100   # the walk really went through the package
    assert got["loaded"] == [], f"the core loaded body modules: {got['loaded']}"


def test_the_import_check_sees_a_body_import(tmp_path):
    """The check above can fail: a core-like package that imports a body is caught."""
    pkg = tmp_path / "corelike"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "uses_body.py").write_text("import monitoring.lease\n")
    code = _IMPORT_ALL.format(bodies=BODIES).replace("coscheduler", "corelike")
    got = _run(code, tmp_path)
    assert got["loaded"] == ["monitoring", "monitoring.lease"]


_TINY_BACKEND = textwrap.dedent('''
    """A site's own body: one node of 8 cores in virtual time; every job runs 60 s alone."""
    from coscheduler.backends import Profile, VirtualBackend


    class TinyBackend(VirtualBackend):
        name = "tiny"

        def submit(self, job, profile=None):
            super().submit(job, profile or Profile(60.0, 0.5))


    def make(options):
        return TinyBackend({"t1": int(options.get("cores", 8))})
''')

_PASS = textwrap.dedent("""
    import json
    from coscheduler.backends.registry import backend_names, make_backend
    from coscheduler.controller import Controller
    from coscheduler.model import Job
    from coscheduler.policies.coalloc import make_policy
    from coscheduler.recorder import MemoryRecorder

    backend = make_backend("tiny", {"cores": 8})
    backend.submit(Job(job_id="j1", job_class="c", cores=4, walltime_s=120.0))
    report = Controller(backend, make_policy("space-sharing"), MemoryRecorder()).step()
    print(json.dumps({"names": backend_names(), "module": type(backend).__module__,
                      "started": report.started, "running": sorted(r.job.job_id for r in backend.running())}))
""")


def _tiny_distribution(root: Path) -> None:
    """A distribution installed into ``root``: its module and a dist-info whose
    entry_points.txt registers it, as pip would leave them."""
    (root / "tiny_body.py").write_text(_TINY_BACKEND)
    info = root / "tiny_body-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-body\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[coscheduler.backends]\ntiny = tiny_body:make\n")


def test_a_backend_from_an_entry_point_runs_a_controller_pass(tmp_path):
    _tiny_distribution(tmp_path)
    got = _run(_PASS, tmp_path)
    assert "tiny" in got["names"] and "slurm" in got["names"]
    assert got["module"] == "tiny_body"   # the plug-in's own class, loaded through its entry point
    assert got["started"] == 1 and got["running"] == ["j1"]


def test_without_its_entry_point_the_backend_is_unknown(tmp_path):
    """The module alone on the path is not enough: the entry point is what registers it."""
    (tmp_path / "tiny_body.py").write_text(_TINY_BACKEND)
    code = textwrap.dedent("""
        import json
        from coscheduler.backends.registry import backend_names, factory
        from coscheduler.model import InvalidInput
        try:
            factory("tiny")
            err = None
        except InvalidInput as exc:
            err = str(exc)
        print(json.dumps({"names": backend_names(), "error": err}))
    """)
    got = _run(code, tmp_path)
    assert "tiny" not in got["names"]
    assert got["error"].startswith("unknown backend 'tiny'; choose from ")


def test_every_entry_point_of_this_project_loads():
    """What pyproject.toml declares resolves to real objects (a renamed module would not)."""
    from coscheduler import plugins

    seen = 0
    for group in plugins.GROUPS:
        for name in plugins.names(group):
            assert plugins.load(group, name) is not None
            seen += 1
    assert seen >= 11
    assert Path(coscheduler.__file__).parent.name == "coscheduler"


def test_a_checkout_never_installed_reads_its_entry_points_from_pyproject(monkeypatch, tmp_path):
    # `python -m coscheduler` from a source tree (the cgroup v2 VM): no packaging metadata
    import importlib.metadata as md

    from coscheduler import plugins

    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(plugins, "distribution", missing)
    found = {ep.name: ep.value for ep in plugins._source_tree_points("coscheduler.commands")}
    assert found["agent"] == "monitoring.cli:agent" and "slurm" in found
    backends = {ep.name for ep in plugins._source_tree_points("coscheduler.backends")}
    assert {"slurm", "slurmrestd", "mesos"} <= backends
    # installed (as here): the metadata alone is used
    monkeypatch.undo()
    assert plugins._source_tree_points("coscheduler.commands") == []
    # a broken pyproject gives nothing rather than an error
    monkeypatch.setattr(plugins, "distribution", missing)
    bad = tmp_path / "pyproject.toml"
    bad.write_text("[project\\n")
    assert plugins._source_tree_points("coscheduler.commands", bad) == []
