"""MRSch's batched environment (multi/fastenv.py) against the reference engine: the same
decisions give the same schedules and observations, with several job sets in flight in
fewer slots than sets; and its bad-input errors."""

from __future__ import annotations

import numpy as np
import pytest

from coscheduler.model import InvalidInput
from coscheduler.multi import mrsch
from coscheduler.multi import workload as mw
from coscheduler.multi.fastenv import MultiBatchEnv, greedy_picks
from coscheduler.multi.metrics import multi_metrics
from coscheduler.multi.train import MAKERS, split
from coscheduler.policies.selection import Scorer
from coscheduler.sim import read_swf, simulate
from coscheduler.sim.resources import pool_model

JOBS = 150
KINDS = {"pick": 0, "backfill": 1}


class Drawn(Scorer):
    """Takes pre-drawn decisions (a fraction of the window per pick) and records what
    MRSchAgent would see: kind, size, state, measurement, goal and its action mask."""

    def __init__(self, u, mask="padding", backfill_choice=True, order="FCFS"):
        super().__init__("drawn", mrsch.WINDOW, mask)
        self.queue_policy = mrsch.window_order(order)
        self.backfill_choice = backfill_choice
        self.u, self.k, self.obs = u, 0, []

    def choose(self, v):
        if self.mask == "padding" or v.kind == "backfill":
            allowed = np.ones(v.size, dtype=bool)
        else:
            allowed = v.runnable if v.runnable.any() else np.ones(v.size, dtype=bool)
        self.obs.append((KINDS[v.kind], v.size, mrsch.state_features(v), mrsch.measurement(v),
                         mrsch.goal_vector(v), allowed))
        pos = int(self.u[self.k] * v.size)
        self.k += 1
        return pos


@pytest.fixture(scope="module")
def workloads(lublin_swf):
    trace = read_swf(lublin_swf)
    return {s: mw.generate(trace, s, 1) for s in ("S4", "S5", "S9")}


def job_sets(wl, count, seed):
    """Sets of every training phase, each with its pools (the same pools for all) and
    its pre-drawn decisions."""
    a, _, _ = split(wl)
    train = wl.select(0, a)
    names = pool_model(wl.machine, wl.requests, wl.node_counts(), wl.max_nodes).names
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        jobs, req = MAKERS[("sampled", "real", "synthetic")[k % 3]](train, JOBS - 10 * k, rng)
        pools = pool_model(wl.machine, req, [wl.cluster.nodes_for(j.procs) for j in jobs],
                           wl.max_nodes, force=names)
        out.append((jobs, pools, rng.random(2 * JOBS)))
    return out


def run_batched(env, sets, decide):
    """Every set through ``env``, a slot refilled as soon as its set ends; ``decide(k,
    step, obs, i)`` answers set k's step-th pick (row i of ``obs``). Returns per set its
    observations, schedule and decision points."""
    queue = list(range(len(sets)))
    in_slot: dict[int, int] = {}
    seen: dict[int, list] = {k: [] for k in range(len(sets))}
    done: dict[int, tuple] = {}

    def fill(slot):
        while queue:
            k = queue.pop(0)
            in_slot[slot] = k
            if env.load(slot, sets[k][0], sets[k][1].take):
                return
            done[k] = (*env.schedule(slot), int(env.sim.decisions[slot]))

    for slot in range(env.slots):
        fill(slot)
    while env.asking.any():
        o = env.observe()
        picks = []
        for i, slot in enumerate(o.active):
            k = in_slot[int(slot)]
            seen[k].append((int(o.kind[i]), int(o.size[i]), o.state[i], o.meas[i], o.goal[i],
                            o.allowed[i, :o.size[i]]))
            picks.append(decide(k, len(seen[k]) - 1, o, i))
        more = env.step_many(o.active, picks)
        for slot, m in zip(o.active, more):
            if not m:
                done[in_slot[int(slot)]] = (*env.schedule(int(slot)),
                                            int(env.sim.decisions[slot]))
                fill(int(slot))
    return seen, done


@pytest.mark.parametrize("set_name,mask,choice,order", [
    ("S4", "padding", True, "FCFS"),       # MRSch as trained: burst buffer
    ("S5", "padding", True, "FCFS"),       # half the nodes per job
    ("S9", "runnable", True, "FCFS"),      # burst buffer and power; the runnable mask
    ("S5", "padding", False, "SJF"),       # EASY in queue order; an SJF window
])
def test_same_decisions_give_the_reference_schedules_and_observations(
        workloads, set_name, mask, choice, order):
    wl = workloads[set_name]
    sets = job_sets(wl, 5, seed=7)
    ref = []
    for jobs, pools, u in sets:
        sel = Drawn(u, mask, choice, order)
        s = simulate(jobs, wl.cluster, sel, "easy", pools=pools)
        ref.append((s, sel.obs))
    pools = sets[0][1]
    env = MultiBatchEnv(wl.cluster, pools.names, pools.capacity, 2, JOBS, mask=mask,
                        backfill_choice=choice, window_order=order)
    seen, done = run_batched(env, sets, lambda k, step, o, i: int(sets[k][2][step] * o.size[i]))
    assert sorted(done) == list(range(len(sets)))
    kinds = set()
    for k, ((sched, obs), (jobs, p, _)) in enumerate(zip(ref, sets)):
        start, end, decisions = done[k]
        assert start.tolist() == sched.start and end.tolist() == sched.end, k
        assert decisions == sched.decisions
        nodes = [wl.cluster.nodes_for(j.procs) for j in jobs]
        assert multi_metrics(jobs, nodes, wl.max_nodes, p, start, end) == \
            multi_metrics(jobs, nodes, wl.max_nodes, p, sched.start, sched.end)
        assert len(seen[k]) == len(obs)
        for a, b in zip(obs, seen[k]):
            assert a[:2] == b[:2]
            kinds.add(a[0])
            for x, y in zip(a[2:5], b[2:5]):
                assert x.shape == y.shape and np.allclose(x, y, rtol=0, atol=1e-12)
            assert np.array_equal(a[5], b[5])
    assert kinds == ({0, 1} if choice else {0})


def test_a_divergent_decision_is_seen(workloads):
    """The comparison is sensitive: decisions changed from the sixth pick on in the fast
    env change the schedule (so equal schedules above are not vacuous)."""
    wl = workloads["S4"]
    sets = job_sets(wl, 1, seed=3)
    jobs, pools, u = sets[0]
    sched = simulate(jobs, wl.cluster, Drawn(u), "easy", pools=pools)
    env = MultiBatchEnv(wl.cluster, pools.names, pools.capacity, 1, JOBS)

    def decide(k, step, o, i):
        pos = int(u[step] * o.size[i])
        return (pos + 1) % o.size[i] if step >= 5 else pos

    _, done = run_batched(env, sets, decide)
    assert done[0][0].tolist() != sched.start


def test_greedy_batched_agent_takes_the_agents_decisions(workloads):
    """MRSchAgent (greedy, random weights) in the engine, and ``greedy_picks`` over the
    batched observations: the same schedule."""
    wl = workloads["S9"]
    sets = job_sets(wl, 3, seed=11)
    pools = sets[0][1]
    state_len = mrsch.state_size(wl.max_nodes, len(pools.names))
    params = {k: v.astype(np.float64) for k, v in
              mrsch.init_params(np.random.default_rng(5), state_len, 3).items()}
    header = {"window": mrsch.WINDOW, "pools": list(pools.names), "nodes": wl.max_nodes,
              "mask": "padding", "backfill_choice": True, "goal": "dynamic"}
    env = MultiBatchEnv(wl.cluster, pools.names, pools.capacity, 2, JOBS)
    picks: dict[tuple, int] = {}

    def decide(k, step, o, i):
        if (k, step) not in picks:  # one forward pass per batch, as training does
            for j, p in enumerate(greedy_picks(params, o, mrsch.WINDOW, 3)):
                picks[(k, step, j)] = int(p)
            picks[(k, step)] = 1
        return picks[(k, step, i)]

    _, done = run_batched(env, sets, decide)
    for k, (jobs, p, _) in enumerate(sets):
        agent = mrsch.MRSchAgent(mrsch.MRSchModel(params, header))
        s = simulate(jobs, wl.cluster, agent, "easy", pools=p)
        assert done[k][0].tolist() == s.start


def test_bad_input_gets_clear_errors(workloads):
    wl = workloads["S4"]
    sets = job_sets(wl, 1, seed=1)
    jobs, pools, _ = sets[0]
    cluster = wl.cluster
    with pytest.raises(InvalidInput, match="needs a multi-resource workload"):
        MultiBatchEnv(cluster, (), (), 1, 10)
    with pytest.raises(InvalidInput, match="pool capacities must be integers >= 1"):
        MultiBatchEnv(cluster, ("burst_buffer",), (0,), 1, 10)
    with pytest.raises(InvalidInput, match="does not change with time, not WFP3"):
        MultiBatchEnv(cluster, pools.names, pools.capacity, 1, 10, window_order="WFP3")
    with pytest.raises(InvalidInput, match="unknown mask rule"):
        MultiBatchEnv(cluster, pools.names, pools.capacity, 1, 10, mask="any")
    with pytest.raises(InvalidInput, match="slots must be an integer >= 1"):
        MultiBatchEnv(cluster, pools.names, pools.capacity, 0, 10)
    env = MultiBatchEnv(cluster, pools.names, pools.capacity, 2, len(jobs))
    with pytest.raises(InvalidInput, match="a set of 151 jobs in a 150-job batch"):
        env.load(0, jobs + jobs[:1], pools.take + pools.take[:1])
    with pytest.raises(InvalidInput, match="149 pool requests for 150 jobs"):
        env.load(0, jobs, pools.take[:-1])
    wide = [jobs[0]._replace(procs=cluster.procs + 1)] + jobs[1:]
    with pytest.raises(InvalidInput, match="job at position 0: run time"):
        env.load(0, wide, pools.take)
    over = [(pools.capacity[0] + 1,)] + list(pools.take[1:])
    with pytest.raises(InvalidInput, match="job at position 0: .*pool takes within"):
        env.load(0, jobs, over)
    assert env.load(0, jobs, pools.take)
    with pytest.raises(InvalidInput, match="slot 1 is not waiting"):
        env.step_many([1], [0])
    with pytest.raises(InvalidInput, match="position 10 is outside the window"):
        env.step_many([0], [10])
    with pytest.raises(InvalidInput, match="distinct"):
        env.step_many([0, 0], [0, 0])


def test_sets_are_grouped_per_phase_and_the_reference_path_is_one_at_a_time():
    from coscheduler.multi.train import TrainConfig, _chunk

    cfg = TrainConfig(episodes=(5, 0, 3), sets_in_flight=2)
    groups, e = [], 0
    while e < 8:
        groups.append(list(_chunk(cfg, e)))
        e = groups[-1][-1] + 1
    assert groups == [[0, 1], [2, 3], [4], [5, 6], [7]]   # never across phases
    assert list(_chunk(cfg, 3)) == [3]    # a resumed run mid-group ends the same group
    assert list(_chunk(TrainConfig(env="reference", sets_in_flight=4), 0)) == [0]
    with pytest.raises(InvalidInput, match="unknown environment 'fast'"):
        TrainConfig(env="fast")
    with pytest.raises(InvalidInput, match="sets_in_flight must be an integer >= 1"):
        TrainConfig(sets_in_flight=0)


def test_memory_rows_at_once_equal_rows_one_by_one():
    from coscheduler.multi.train import _Memory

    rng = np.random.default_rng(0)
    one, many = _Memory(7, 3, 2), _Memory(7, 3, 2)
    for n in (3, 5, 12, 1):
        s, m, g = rng.random((n, 3)), rng.random((n, 2)), rng.random((n, 2))
        a, y, v = rng.integers(0, 9, n), rng.random((n, 6, 2)), rng.random((n, 6))
        one.add(list(zip(s, m, g, a)), y, v)
        many.add_rows(s, m, g, a, y, v)
        assert (one.pos, one.count) == (many.pos, many.count)
        for k in _Memory._FIELDS:
            assert np.array_equal(getattr(one, k), getattr(many, k)), k


_STOP_AND_RESUME = """
import json, sys
import numpy as np
from coscheduler.multi import workload as mw
from coscheduler.multi.train import TrainConfig, train
from coscheduler.sim.swf import read_swf

wl = mw.generate(read_swf(sys.argv[1]), "S5", 1).select(0, 3000)
out = sys.argv[2]

def run(name, **kw):
    m = train(wl, f"{out}/{name}.model", TrainConfig(episodes=(3, 0, 0), jobs_per_set=48,
              steps_per_episode=3, batch=16, sets_in_flight=2, **kw), resume=True)
    h = m.header
    return {"episodes": h["episodes"], "steps": h["training_steps"], "losses": h["losses"],
            "stopped_by": h["stopped_by"], "env": h["env"], "flight": h["sets_in_flight"],
            "validation": h["validation"],
            "weights": float(sum(np.abs(v).sum() for v in m.params.values()))}

print(json.dumps([run("whole"), run("part", max_steps=1), run("part")]))
"""


def test_a_batched_run_stopped_by_its_budget_and_resumed_is_the_run_never_stopped(
        tmp_path, lublin_swf):
    """Two sets in flight: the step budget stops the run after its first group of two
    sets, and a resumed run ends as the run never stopped (JAX in a child process)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _STOP_AND_RESUME, str(lublin_swf),
                           str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    whole, first, resumed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert whole["env"] == "batched" and whole["flight"] == 2 and whole["episodes"] == 3
    assert first["episodes"] == 2 and first["stopped_by"] == "max_steps"
    assert resumed["episodes"] == 3 and resumed["stopped_by"] is None
    for key in ("steps", "losses", "validation"):
        assert resumed[key] == whole[key], key
    assert resumed["weights"] == pytest.approx(whole["weights"], rel=1e-6)


def test_the_bench_takes_the_same_decisions_in_both_environments(lublin_swf):
    from coscheduler.bench.learned import _mrsch_batched, _mrsch_reference, _mrsch_sets

    wl, sets = _mrsch_sets(lublin_swf, "S5", 4, 64)
    ref, bat = _mrsch_reference(wl, sets), _mrsch_batched(wl, sets)
    assert ref == bat and ref[0] == 4 * 64   # every job is picked once


def test_a_window_order_that_ages_is_trained_on_the_reference_path_only():
    from coscheduler.multi.train import TrainConfig
    for order in ("WFP3", "UNICEP"):
        with pytest.raises(InvalidInput, match=f"window order {order} ranks jobs by their "
                                               "wait.*--env reference"):
            TrainConfig(window_order=order)
        assert TrainConfig(window_order=order, env="reference").window_order == order
    assert TrainConfig(window_order="SJF").env == "batched"
