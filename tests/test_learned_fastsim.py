"""The compiled batched environments (learned/fastsim.py, batchenv.py, batchinspect.py)
against the reference ones (learned/episode.py over the simulator engine): several
episodes in flight at once, answered together with ``step_many`` by seeded random
decisions, slots refilled as episodes end; every episode must end with the reference's
start and end times, metrics and reward, and every observation must be the reference's.
numpy (and numba when installed: ``fastsim.COMPILED``)."""

from __future__ import annotations

import numpy as np
import pytest

from coscheduler.data import swf_trace
from coscheduler.learned import fastsim
from coscheduler.learned.batchenv import BatchSchedulingEnv
from coscheduler.learned.batchinspect import BatchInspectorEnv
from coscheduler.learned.episode import InspectorEpisode, SchedulingEpisode
from coscheduler.learned.features import Normalisation
from coscheduler.policies import get_policy
from coscheduler.sim.cluster import Cluster
from coscheduler.sim.replay import window
from coscheduler.sim.swf import read_swf

from test_learned_batchenv import messy_jobs


@pytest.fixture(scope="module")
def traces():
    """lublin_256 and HPC2N windows, and a messy machine (4 nodes of 4 processors: jobs
    round up to whole nodes; submits out of order with ties, estimates below run times)."""
    lublin = read_swf(swf_trace("lublin_256.swf"))
    hpc2n = read_swf(swf_trace("HPC2N-2002-2.2-cln.swf.gz"))
    out = []
    for trace, starts in ((lublin, (0, 333, 1200, 2500, 4000, 7000)),
                          (hpc2n, (0, 9000, 40_000, 77_000, 120_000, 190_000))):
        cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
        out.append((cluster, trace.max_procs, [window(trace.jobs, s, 200) for s in starts]))
    out.append((Cluster(nodes=4, procs_per_node=4), 16, [messy_jobs(s, 150) for s in range(4)]))
    return out


def play(env, refs: list, sequences: list, check) -> int:
    """Feed ``sequences`` through ``env`` (fewer slots than sequences: refills) and the
    reference episodes ``refs`` with the same answers (``check`` compares the observations
    and returns the asking slots, their answers and the same answers in the reference's
    terms); returns the steps taken."""
    slot_of = {}
    waiting = list(range(len(sequences)))
    free = list(range(env.slots))
    steps = 0

    def refill() -> None:
        while free and waiting:
            e = waiting.pop(0)
            slot = free[-1]
            asks = env.load(slot, sequences[e])
            assert asks == refs[e].reset(), e
            if asks:
                slot_of[slot] = e
                free.pop()
            else:
                finish(slot, e)

    def finish(slot: int, e: int) -> None:
        start, end = env.schedule(slot)
        assert start == refs[e].schedule.start and end == refs[e].schedule.end, e
        assert env.metrics(slot) == refs[e].metrics, e

    refill()
    while env.asking.any():
        slots, answers, ref_answers = check(env, slot_of)
        going = env.step_many(slots, answers)
        for slot, answer, asks in zip(slots.tolist(), ref_answers, going.tolist()):
            ref = refs[slot_of[slot]]
            reward = ref.step(answer)
            assert asks == (not ref.done)
            if not asks:
                finish(slot, slot_of.pop(slot))
                assert env.reward(slot)[0] == reward
                free.append(slot)
        steps += len(slots)
        refill()
    assert not waiting and not slot_of
    return steps


@pytest.mark.parametrize("backfill", ["none", "easy"])
def test_rlscheduler_episodes_in_flight_equal_the_reference(traces, backfill):
    rng = np.random.default_rng(11)
    steps = 0
    for cluster, max_procs, sequences in traces:
        norm = Normalisation(estimate_s=20_000.0)
        env = BatchSchedulingEnv(cluster, 4, 200, backfill, max_procs=max_procs, norm=norm)
        refs = [SchedulingEpisode(jobs, cluster, backfill, max_procs=max_procs, norm=norm)
                for jobs in sequences]

        def check(env, slot_of):
            o = env.observe()
            positions = []
            for i, slot in enumerate(o.active.tolist()):
                obs, allowed = refs[slot_of[slot]].observe()
                rows = slice(o.starts[i], o.starts[i] + o.counts[i])
                n = int(o.counts[i])
                assert np.array_equal(obs[:n], o.rows[rows])
                assert np.array_equal(allowed[:n], o.allowed[rows]) and not allowed[n:].any()
                positions.append(int(rng.choice(np.flatnonzero(allowed))))
            return o.active, np.array(positions), positions

        steps += play(env, refs, sequences, check)
    assert steps > 1000


@pytest.mark.parametrize("backfill", ["none", "easy"])
@pytest.mark.parametrize("base", ["SJF", "F1"])
def test_inspector_episodes_in_flight_equal_the_reference(traces, backfill, base):
    rng = np.random.default_rng(12)
    steps = 0
    policy = get_policy(base)
    for cluster, max_procs, sequences in traces:
        env = BatchInspectorEnv(cluster, 3, 200, policy, backfill, max_procs=max_procs)
        refs = [InspectorEpisode(jobs, cluster, policy, backfill, max_procs=max_procs)
                for jobs in sequences]

        def check(env, slot_of):
            active, rows = env.observe()
            for i, slot in enumerate(active.tolist()):
                # equal to rounding: the summed queue delay adds in another order
                assert np.allclose(refs[slot_of[slot]].observe(), rows[i], rtol=1e-12,
                                   atol=1e-15)
            accept = rng.random(len(active)) < 0.7
            return active, accept, [0 if a else 1 for a in accept.tolist()]  # 1: reject

        steps += play(env, refs, sequences, check)
        assert sum(int(env.sim.rejections[k]) for k in range(env.slots)) > 0
    assert steps > 1000


@pytest.mark.parametrize("backfill", ["none", "easy"])
def test_a_slot_reloaded_mid_episode_starts_afresh(traces, backfill):
    """A slot reloaded before its episode ended (jobs still queued and running) with a
    shorter sequence plays that sequence as the reference does."""
    cluster, max_procs, sequences = traces[0]
    env = BatchSchedulingEnv(cluster, 1, 200, backfill, max_procs=max_procs)
    assert env.load(0, sequences[2])
    for _ in range(15):
        assert env.step(0, 0)
    assert env.sim.qlen[0] > 0 and env.sim.nrun[0] > 0
    short = sequences[3][:120]
    ref = SchedulingEpisode(short, cluster, backfill, max_procs=max_procs)
    asking = ref.reset()
    assert env.load(0, short) == asking
    while asking:
        o = env.observe()
        obs, allowed = ref.observe()
        assert np.array_equal(obs[:o.counts[0]], o.rows) and not allowed[o.counts[0]:].any()
        pos = int(np.flatnonzero(allowed)[-1])
        ref.step(pos)
        asking = env.step(0, pos)
        assert asking == (not ref.done)
    assert env.schedule(0) == (ref.schedule.start, ref.schedule.end)
    assert env.metrics(0) == ref.metrics


def test_the_inspectors_base_replay_is_the_engines(traces):
    """The base policy's bsld (the reward's reference) equals ``simulate``'s, which the
    reference episode computes."""
    cluster, max_procs, sequences = traces[1]
    for backfill in ("none", "easy"):
        env = BatchInspectorEnv(cluster, 1, 200, get_policy("SJF"), backfill,
                                max_procs=max_procs)
        for jobs in sequences[:3]:
            ref = InspectorEpisode(jobs, cluster, get_policy("SJF"), backfill,
                                   max_procs=max_procs)
            ref.reset()
            env.load(0, jobs)
            assert env.base_bsld[0] == ref.base_bsld


def test_step_many_refuses_bad_answers(traces):
    from coscheduler.model import InvalidInput

    cluster, max_procs, sequences = traces[0]
    env = BatchSchedulingEnv(cluster, 2, 200, max_procs=max_procs)
    env.load(0, sequences[0])
    with pytest.raises(InvalidInput, match="slot 1 is not waiting"):
        env.step_many([0, 1], [0, 0])
    with pytest.raises(InvalidInput, match="outside the window"):
        env.step_many([0], [999])
    with pytest.raises(InvalidInput, match="job at position 3"):
        bad = list(sequences[1])
        bad[3] = bad[3]._replace(run=0.0)
        env.load(1, bad)


def test_numba_compiles_the_environments():
    """The rl extra installs numba; without it the same code runs as plain Python, far
    slower (``cosched bench learned`` prints which)."""
    import importlib.util

    assert fastsim.COMPILED == (importlib.util.find_spec("numba") is not None)
