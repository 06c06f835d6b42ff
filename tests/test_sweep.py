"""Parameter sweeps on local processes and on a Dask or Ray cluster (coscheduler/sweep.py, issue 24):
the parallel figures are exactly the serial ones, a failing task names itself, a bad worker
count or a missing cluster library is a one-line error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from coscheduler import sweep
from coscheduler.model import InvalidInput
from coscheduler.cli import main
from coscheduler.experiments.paper import run_experiment

# Small enough to be quick (a few seconds serial), large enough that ASA_X co-allocates and
# learns across the two repetitions of each size.
PAPER = ["simulate", "paper", "--cores", "64,128", "--repeat", "2", "--scale", "0.05", "--json"]


def _square_or_fail(x: int, fail_on: int | None = None, delay: float = 0.0) -> tuple[int, int]:
    time.sleep(delay)
    if x == fail_on:
        raise ValueError(f"bad value {x}")
    return x * x, os.getpid()


class _Unrebuildable(RuntimeError):
    """An error whose __init__ does not take its own ``args``: it pickles, and unpickling it
    raises TypeError (how SwfFormatError broke a pool before it had ``__reduce__``)."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: {why}")


class _UnrebuildableInput(InvalidInput):
    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: {why}")


def _raise_unrebuildable(x: int, kind: str = "runtime") -> int:
    if x == 2:
        raise (_UnrebuildableInput if kind == "input" else _Unrebuildable)("trace.swf:3", "bad line")
    return x


def _paper_json(*extra: str) -> dict:
    r = CliRunner().invoke(main, PAPER + list(extra))
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads(r.stdout)


def test_paper_figures_on_two_workers_equal_the_serial_ones():
    serial = _paper_json("--workers", "1")
    parallel = _paper_json("--workers", "2")
    assert parallel == serial
    # the comparison means something: ASA_X co-allocated and carried its rounds over
    asax = [r for r in serial["runs"] if r["policy"] == "asax"]
    # 2 sizes x 4 policies (space sharing, Static, ASA_X, the oracle) x 2 repetitions
    assert len(serial["runs"]) == 16 and any(r["coallocations"] for r in asax)
    assert all(b["rounds_closed"] > a["rounds_closed"] for a, b in zip(asax[::2], asax[1::2]))


def test_multi_figures_on_two_workers_equal_the_serial_ones():
    from coscheduler.data import swf_dir

    trace = swf_dir() / "lublin_256.swf"
    args = ["simulate", "multi", "--from", str(trace), "--sets", "S1,S2", "--methods",
            "fcfs,bbsched", "--jobs", "64", "--windows", "2", "--json"]
    out = []
    for workers in ("1", "2"):
        r = CliRunner().invoke(main, args + ["--workers", workers])
        assert r.exit_code == 0, (r.output, r.exception)
        out.append(json.loads(r.stdout))
    assert out[1] == out[0]
    assert [(x["set"], x["method"]) for x in out[0]["results"]] == [
        ("S1", "fcfs"), ("S1", "bbsched"), ("S2", "fcfs"), ("S2", "bbsched")]


def test_run_experiment_parallel_keeps_the_serial_order_and_learning():
    serial = run_experiment([64, 128], ["asax", "static"], repeat=2, scale=0.05)
    parallel = run_experiment([64, 128], ["asax", "static"], repeat=2, scale=0.05, workers=2)
    assert [(r.cores, r.policy, r.repeat) for r in parallel] == [
        (c, p, k) for c in (64, 128) for p in ("asax", "static") for k in (0, 1)]
    assert [r.as_json() for r in parallel] == [r.as_json() for r in serial]
    assert [r.weight_history for r in parallel] == [r.weight_history for r in serial]


def test_a_size_given_twice_keeps_its_runs_in_the_serial_order_on_two_workers():
    """Runs are put back by their place in the serial order (size index, policy, repetition),
    not by their size, so a size listed twice is not interleaved."""
    args = ([64, 64], ["static", "space-sharing"])
    serial = run_experiment(*args, repeat=2, scale=0.05)
    parallel = run_experiment(*args, repeat=2, scale=0.05, workers=2)
    assert [(r.cores, r.policy, r.repeat) for r in serial] == [
        (64, p, k) for _ in range(2) for p in ("static", "space-sharing") for k in (0, 1)]
    assert [r.as_json() for r in parallel] == [r.as_json() for r in serial]


def test_results_come_back_in_task_order_from_several_processes():
    # the first task is the slowest, so the workers finish out of order
    tasks = [sweep.Task(f"t{i}", (i, None, 0.4 if i == 0 else 0.0)) for i in range(6)]
    seen: list[str] = []
    out = sweep.run_tasks(_square_or_fail, tasks, workers=2,
                          on_result=lambda t, r: seen.append(t.name))
    assert [v for v, _ in out] == [i * i for i in range(6)]
    assert seen == [t.name for t in tasks]
    assert len({pid for _, pid in out} - {os.getpid()}) == 2


_PRELOAD_CHECK = """
import json, os, sys
from coscheduler import sweep

def imported(name):
    return name in sys.modules, os.getpid()

if __name__ == "__main__":
    name, cores = sys.argv[1], int(sys.argv[2])
    sweep.default_workers = lambda: cores
    assert sweep.start_method() == "fork", "a fresh interpreter must fork"
    tasks = [sweep.Task(f"t{i}", (name,)) for i in range(2)]
    out = sweep.run_tasks(imported, tasks, workers=2, preload=(name,))
    print(json.dumps({"loaded": [loaded for loaded, _ in out],
                      "workers": len({pid for _, pid in out} - {os.getpid()}),
                      "here": name in sys.modules}))
"""


@pytest.mark.parametrize("cores", [4, 1])
def test_a_slow_module_is_imported_before_forking_only_when_workers_outnumber_cores(
        tmp_path, cores):
    """With a core per worker each task imports what it needs, alongside the others' work
    (importing sklearn before the fork held ``simulate paper --repeat 3`` back 0.9 s);
    with more workers than cores one import before the fork saves each worker its own.
    Run in a fresh interpreter: a pytest process that earlier tests left with threads
    (a test server's) spawns instead of forking, and the test would only be skipped."""
    name = f"cosched_slow_module_{cores}"
    (tmp_path / f"{name}.py").write_text("LOADED = True\n")
    script = tmp_path / "check.py"
    script.write_text(_PRELOAD_CHECK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script), name, str(cores)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["workers"] >= 1                      # ran in worker processes
    assert out["loaded"] == [cores < 2] * 2
    assert out["here"] is (cores < 2)


def test_a_failing_task_names_itself_and_carries_the_workers_traceback():
    tasks = [sweep.Task(f"cores {c}", (c, 128)) for c in (64, 128, 256)]
    with pytest.raises(sweep.TaskFailed) as info:
        sweep.run_tasks(_square_or_fail, tasks, workers=2)
    err = info.value
    assert err.task == "cores 128"
    assert str(err) == "task cores 128 failed: ValueError: bad value 128"
    assert "_square_or_fail" in err.worker_traceback


@pytest.mark.parametrize("kind, cause", [("runtime", RuntimeError), ("input", InvalidInput)])
def test_an_error_that_cannot_be_unpickled_comes_back_by_message_not_as_a_dead_worker(kind, cause):
    # Before: "task x=2 failed: RuntimeError: a worker process died (...)", what went wrong lost.
    tasks = [sweep.Task(f"x={x}", (x, kind)) for x in (1, 2, 3)]
    with pytest.raises(sweep.TaskFailed) as info:
        sweep.run_tasks(_raise_unrebuildable, tasks, workers=2)
    err = info.value
    assert err.task == "x=2"
    assert type(err.cause) is cause
    name = "_UnrebuildableInput" if kind == "input" else "_Unrebuildable"
    want = "trace.swf:3: bad line" if kind == "input" else f"{name}: trace.swf:3: bad line"
    assert str(err.cause) == want
    assert "_raise_unrebuildable" in err.cause.worker_traceback
    # the pool was not broken: the next sweep in this process runs
    assert sweep.run_tasks(_raise_unrebuildable, tasks[:1] + tasks[2:], workers=2) == [1, 3]


def test_a_bad_trace_on_two_workers_is_the_same_one_line_error_as_on_one(tmp_path):
    bad = tmp_path / "garbage.swf"
    bad.write_bytes(bytes(range(256)) * 4)
    outs = []
    for workers in ("1", "2"):
        r = CliRunner().invoke(main, ["simulate", "learned", "--traces", str(bad), "--out",
                                      str(tmp_path / workers), "--workers", workers])
        assert r.exit_code == 1, r.output
        assert "Traceback" not in r.output and "worker process died" not in r.output
        outs.append(r.output.strip().splitlines()[-1])
    assert outs[0] == outs[1]
    assert outs[0].startswith(f"Error: {bad}:1: expected 18 fields"), outs[0]


def test_a_task_whose_arguments_do_not_pickle_names_itself():
    tasks = [sweep.Task("fine", (2,)), sweep.Task("lambda inside", (lambda: 1,))]
    with pytest.raises(sweep.TaskFailed, match="task lambda inside failed"):
        sweep.run_tasks(_square_or_fail, tasks, workers=2)


def test_serial_runs_in_this_process_and_raises_unchanged():
    out = sweep.run_tasks(_square_or_fail, [sweep.Task("a", (3,))], workers=4)
    assert out == [(9, os.getpid())]
    with pytest.raises(ValueError, match="bad value 3"):
        sweep.run_tasks(_square_or_fail, [sweep.Task("a", (3, 3))], workers=1)


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "many"])
@pytest.mark.parametrize("command", [PAPER[:2], ["simulate", "multi", "--from", "x.swf"]])
def test_workers_below_one_or_not_a_count_are_refused_at_parse_time(command, value):
    t0 = time.monotonic()
    r = CliRunner().invoke(main, command + ["--workers", value])
    assert r.exit_code == 2, (r.output, r.exception)
    assert "Traceback" not in r.output and "--workers" in r.output
    assert time.monotonic() - t0 < 5


def test_cluster_without_dask_installed_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)   # import distributed -> ImportError
    r = CliRunner().invoke(main, PAPER + ["--cluster", "tcp://127.0.0.1:1"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.count("\n") == 1 and "coscheduler[cluster]" in r.output, r.output


def test_workers_must_be_a_positive_count():
    with pytest.raises(sweep.SweepError, match="workers must be an integer >= 1, got 0"):
        sweep.run_tasks(_square_or_fail, [], workers=0)


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       scheduler_port=0, silence_logs=40, timeout="60s")
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close(timeout=30)


def test_paper_on_a_local_dask_cluster_gives_the_serial_figures(dask_cluster):
    t0 = time.monotonic()
    assert _paper_json("--cluster", dask_cluster) == _paper_json("--workers", "1")
    assert time.monotonic() - t0 < 300


# the shipped no-backfill RL order and one inspector on lublin_256: some 13 s serial here
LEARNED = ["simulate", "learned", "--traces", "lublin_256.swf", "--models",
           "lublin256,lublin256-sjf", "--json"]


def _cli_json(args: list[str]) -> dict:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads(r.stdout)


def _learned_report(out: Path, *extra: str) -> dict:
    report = _cli_json(LEARNED + list(extra) + ["--out", str(out)])
    # what differs by design: the wall time and the output folder's paths
    assert report.pop("seconds") > 0
    for key in ("curves", "window_plots"):
        report[key] = [Path(p).name for p in report[key]]
    return report


def test_learned_and_multi_on_a_local_dask_cluster_give_the_serial_figures(dask_cluster,
                                                                          tmp_path):
    """Issue 24: the other two sweeps run their independent evaluations on a cluster too."""
    from coscheduler.data import swf_dir

    serial = _learned_report(tmp_path / "serial", "--workers", "1")
    assert _learned_report(tmp_path / "dask", "--cluster", dask_cluster) == serial
    assert set(serial["traces"]) == {"lublin_256.swf"}
    multi = ["simulate", "multi", "--from", str(swf_dir() / "lublin_256.swf"), "--sets",
             "S1,S2", "--methods", "fcfs,bbsched", "--jobs", "64", "--windows", "2", "--json"]
    assert _cli_json(multi + ["--cluster", dask_cluster]) == _cli_json(multi + ["--workers", "1"])


def test_a_failing_task_on_dask_names_itself(dask_cluster):
    tasks = [sweep.Task(f"x={x}", (x, 2)) for x in (1, 2, 3)]
    with pytest.raises(sweep.TaskFailed, match=r"^task x=2 failed: ValueError: bad value 2$"):
        sweep.run_tasks(_square_or_fail, tasks, cluster=dask_cluster)


def test_an_error_that_cannot_be_unpickled_comes_back_by_message_on_dask(dask_cluster):
    tasks = [sweep.Task(f"x={x}", (x,)) for x in (1, 2, 3)]
    with pytest.raises(sweep.TaskFailed, match=r"^task x=2 failed: RuntimeError: "
                                               r"_Unrebuildable: trace.swf:3: bad line$"):
        sweep.run_tasks(_raise_unrebuildable, tasks, cluster=dask_cluster)


def test_an_unreachable_scheduler_is_a_one_line_error():
    pytest.importorskip("distributed")
    r = CliRunner().invoke(main, PAPER + ["--cluster", "tcp://127.0.0.1:9"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in r.output, r.output


# -- Ray: a head started by the test on loopback (2 CPUs, 100 MB object store) ---------------

def _in_session(sid: int) -> list[int]:
    out = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == sid:
                out.append(pid)
        except OSError:
            pass
    return out


def _end_session(sid: int) -> None:
    """Stop the processes of the session the test started (by its id: Ray's workers make
    process groups of their own, so not by group): TERM, then KILL what is left."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
        for pid in _in_session(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait_s
        while _in_session(sid) and time.monotonic() < end:
            time.sleep(0.1)
        if not _in_session(sid):
            return


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'coscheduler[ray]'")
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.exists():
        pytest.skip(f"Ray's command {ray_bin} is not installed beside this Python")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # a throw-away cluster on loopback: no token to set up, no usage report
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    log = tmp_path_factory.mktemp("ray") / "head.log"
    t0 = time.monotonic()
    with open(log, "wb") as out:
        p = subprocess.Popen([str(ray_bin), "start", "--head", f"--port={port}",
                              "--node-ip-address=127.0.0.1", "--num-cpus=2",
                              f"--object-store-memory={100 << 20}", "--include-dashboard=false",
                              "--disable-usage-stats"], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        rc = p.wait(timeout=180)
        assert rc == 0, log.read_text()[-2000:]
        print(f"ray start --head took {time.monotonic() - t0:.1f} s")
        yield f"ray:127.0.0.1:{port}"
    finally:
        _end_session(p.pid)
        assert not _in_session(p.pid)
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved


def test_paper_on_a_local_ray_cluster_gives_the_serial_figures(ray_head):
    t0 = time.monotonic()
    on_ray = _paper_json("--cluster", ray_head)
    print(f"simulate paper on Ray: {time.monotonic() - t0:.1f} s")
    assert on_ray == _paper_json("--workers", "1")
    # (functions of the package: Ray's workers do not have the tests folder on their path)
    tasks = [sweep.Task(f"int({x!r})", (x,)) for x in ("1", "two", "3")]
    with pytest.raises(sweep.TaskFailed, match=r"^task int\('two'\) failed: ValueError: invalid literal"):
        sweep.run_tasks(int, tasks, cluster=ray_head)
    # the tasks ran in Ray's worker processes, not here
    pids = sweep.run_tasks(os.getpid, [sweep.Task(str(i)) for i in range(2)], cluster=ray_head)
    assert os.getpid() not in pids


def test_learned_on_a_local_ray_cluster_gives_the_serial_figures(ray_head, tmp_path):
    serial = _learned_report(tmp_path / "serial", "--workers", "1")
    assert _learned_report(tmp_path / "ray", "--cluster", ray_head) == serial


@pytest.mark.parametrize("address, message", [
    ("ray:127.0.0.1:9", "cannot reach the Ray cluster at ray:127.0.0.1:9"),
    ("ray:nowhere", "expected ray://HOST:PORT (Ray Client), ray:HOST:PORT (the head's address) or ray:auto"),
    ("ray://127.0.0.1:99999", "expected ray://HOST:PORT"),
])
def test_a_bad_or_unreachable_ray_address_is_a_one_line_error(address, message):
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'coscheduler[ray]'")
    t0 = time.monotonic()
    r = CliRunner().invoke(main, PAPER + ["--cluster", address])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert r.output.count("\n") == 1 and message in r.output, r.output
    assert time.monotonic() - t0 < 15


def test_ray_not_installed_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    r = CliRunner().invoke(main, PAPER + ["--cluster", "ray:auto"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.count("\n") == 1 and "coscheduler[ray]" in r.output, r.output
