"""The compiled whole-trace FCFS replay (coscheduler/learned/wholetrace.py) against the
Python engine (sim.replay.replay): the bundled traces whole, with and without EASY, and a
messy machine (submits out of order with ties, estimates below run times, jobs rounded
up to whole nodes). Start and end times, metrics and decision counts must be equal, bit
for bit; the CLI's two engines print the same figures."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.data import swf_trace
from coscheduler.learned import wholetrace
from coscheduler.model import InvalidInput
from coscheduler.policies.queue import get_policy
from coscheduler.sim.replay import replay, window
from coscheduler.sim.swf import SwfTrace, read_swf

from test_learned_batchenv import messy_jobs

pytestmark = pytest.mark.skipif(not wholetrace.available(),
                                reason="numba is not installed (the rl extra)")


def _same(trace: SwfTrace, backfill: str, jobs=None) -> None:
    ref = replay(trace, "FCFS", backfill, jobs=jobs)
    fast = wholetrace.replay(trace, jobs=jobs, backfill=backfill)
    assert fast.schedule.start == ref.schedule.start
    assert fast.schedule.end == ref.schedule.end
    assert fast.metrics == ref.metrics
    assert fast.schedule.decisions == ref.schedule.decisions
    assert fast.as_json().keys() == ref.as_json().keys()


@pytest.mark.parametrize("name", ["lublin_256.swf", "lublin_256_new2.swf",
                                  "CTC-SP2-1996-3.1-cln.swf.gz", "HPC2N-2002-2.2-cln.swf.gz"])
def test_whole_bundled_traces_replay_as_the_python_engine(name):
    trace = read_swf(swf_trace(name))
    for backfill in ("none", "easy"):
        _same(trace, backfill)
    _same(trace, "easy", jobs=window(trace.jobs, len(trace.jobs) // 3, 2000))


def test_a_messy_machine_replays_as_the_python_engine():
    for seed in range(4):
        trace = SwfTrace(path="messy", max_nodes=4, max_procs=16, jobs=messy_jobs(seed, 300))
        for backfill in ("none", "easy"):
            _same(trace, backfill)


def test_only_fcfs_with_none_or_easy_is_handled():
    assert wholetrace.handles(get_policy("FCFS"), "easy")
    assert wholetrace.handles(get_policy("FCFS"), "none")
    assert not wholetrace.handles(get_policy("FCFS"), "conservative")
    assert not wholetrace.handles(get_policy("SJF"), "easy")
    trace = read_swf(swf_trace("lublin_256.swf"))
    with pytest.raises(InvalidInput, match="backfill none or easy, not 'conservative'"):
        wholetrace.replay(trace, backfill="conservative")


def test_the_cli_engines_print_the_same_figures(lublin_swf):
    out = {}
    for engine in ("python", "compiled"):
        r = CliRunner().invoke(main, ["simulate", "swf", str(lublin_swf), "--backfill", "easy",
                                      "--engine", engine, "--json"])
        assert r.exit_code == 0, r.output
        out[engine] = json.loads(r.stdout)
        assert ("FCFS: compiled engine" in r.stderr) == (engine == "compiled")
    for key in ("avg_bsld", "avg_wait", "avg_turnaround", "max_bsld", "utilization", "makespan"):
        assert out["python"][key] == out["compiled"][key], key
    # an order the kernels do not follow is refused on the compiled engine, in one line
    r = CliRunner().invoke(main, ["simulate", "swf", str(lublin_swf), "--policy", "SJF",
                                  "--engine", "compiled"])
    assert r.exit_code == 2 and "--engine compiled replays FCFS" in r.output
    assert "Traceback" not in r.output
