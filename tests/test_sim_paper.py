"""`cosched simulate paper`: the paper's evaluation in virtual time with the real controller.

Runs at a small scale (stages of seconds) so the whole file takes a few seconds; the
controller's time constants shrink with the scale, so these are the scale-1 runs in
miniature.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.experiments.paper import (PAPER_TABLE3, cluster_nodes, normalised_runtimes,
                                           paper_workload, run_experiment, run_paper, summarise)
from coscheduler.experiments.report import report
from coscheduler.model import InvalidInput
from coscheduler.recorder import MemoryRecorder

SCALE = 0.05
POLICIES = ("space-sharing", "static", "asax")


@pytest.fixture(scope="module")
def runs64():
    return {p: run_paper(64, p, seed=0, scale=SCALE) for p in POLICIES}


def cosched(*args):
    return CliRunner().invoke(main, list(args))


# -- the workload -----------------------------------------------------------------------------

def test_workload_is_the_papers_mix():
    stages = paper_workload(SCALE)
    assert len(stages) == 46
    assert len({s.workflow for s in stages}) == 15
    kinds = {k: len({s.workflow for s in stages if s.kind == k})
             for k in ("montage", "blast", "statistics", "synthetic")}
    assert kinds == {"montage": 4, "blast": 4, "statistics": 4, "synthetic": 3}
    assert all(s.job.submit_time == 0.0 for s in stages)
    assert max(s.job.cores for s in stages) == 64
    # Classes are kind/stage/cores: the degradation loss compares like with like, and ASA_X
    # may pool them by kind or by stage (classes="stage" by default: kind/stage).
    assert stages[0].job.job_class == "montage/mProject/8"
    # The paper's geometry: every stage holds its workflow's cores.
    assert all(s.job.cores == int(s.workflow.rsplit("-", 1)[1]) for s in stages)
    # Memory is the paper's Table 2 share of the allocation.
    assert {s.kind: s.profile.mem_percent for s in stages} == pytest.approx(
        {"montage": 10.0, "blast": 44.0, "statistics": 5.0, "synthetic": 95.0})


def test_sequential_stages_hold_their_workflows_cores_or_one():
    one = paper_workload(SCALE, sequential_cores="one")
    held = paper_workload(SCALE)
    for a, b in zip(one, held):
        cores = int(a.workflow.rsplit("-", 1)[1])
        assert b.job.cores == cores
        # Same CPU work: u x cores is kept.
        assert b.profile.cpu_util * b.job.cores == pytest.approx(a.profile.cpu_util * a.job.cores)
    with pytest.raises(InvalidInput, match="sequential_cores"):
        paper_workload(SCALE, sequential_cores="all")


# -- structural facts of a run ------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_every_job_ends_exactly_once_after_its_parent(runs64, policy):
    run = runs64[policy]
    assert sorted(run.outcome_ids) == sorted(s.job_id for s in run.stages)
    assert len(run.outcome_ids) == len(set(run.outcome_ids)) == 46
    end = {s.job_id: s.end for s in run.stages}
    for s in run.stages:
        assert s.state == "completed", (s.job_id, s.state)
        for parent in s.depends_on:
            assert s.start >= end[parent] - 1e-9, (s.job_id, parent)
            assert s.eligible == pytest.approx(max(end[p] for p in s.depends_on))


def test_space_sharing_never_coallocates_nor_overbooks(runs64):
    run = runs64["space-sharing"]
    assert run.coallocations == 0 and all(s.host is None for s in run.stages)
    # Held cores at every start (the sum of the running jobs' cores), checked here from
    # the stage records rather than trusted from the run's own peak.
    for t in sorted({s.start for s in run.stages}):
        held = sum(s.cores for s in run.stages if s.start <= t < s.end)
        assert held <= 64, t
    assert run.peak_held_cores <= 64
    # Nothing co-allocated: held core-seconds are exactly the jobs' cores x runtimes.
    assert run.held_core_seconds == pytest.approx(
        sum(s.cores * (s.end - s.start) for s in run.stages))
    assert 0 < run.cpu_util <= 1 and 0 < run.cluster_util <= run.cpu_util


def test_static_coallocates_at_half_quota(runs64):
    run = runs64["static"]
    assert run.coallocations > 0
    assert run.guest_quotas == [0.5] * run.coallocations
    assert run.peak_held_cores <= 64


def test_asax_quotas_are_its_action_fractions(runs64):
    run = runs64["asax"]
    assert run.coallocations > 0
    # Quotas are at most a_j = j/10 for j >= 1 (a_0 declines and never starts a guest);
    # idle-only lending caps them at the host's idle share and the guest's need.
    assert all(0 < q <= 0.9 + 1e-9 for q in run.guest_quotas)
    assert run.learning == "fresh"   # no recorder given: a fresh learner


def test_coallocation_shortens_waits_at_load_8x(runs64):
    ss = runs64["space-sharing"].mean_wait_s
    assert runs64["static"].mean_wait_s < ss
    assert runs64["asax"].mean_wait_s < ss


def test_asax_protects_its_hosts_where_static_does_not(runs64):
    # Lending only the idle share: ASA_X's hosts slow far less than Static's, whose
    # hosts give up half their quota whatever they use.
    asax, static = runs64["asax"], runs64["static"]
    assert asax.host_slowdown is not None and static.host_slowdown is not None
    assert asax.host_slowdown < 0.10 < static.host_slowdown


def test_metrics_follow_their_definitions(runs64):
    run = runs64["static"]
    assert run.makespan_s == pytest.approx(max(s.end for s in run.stages))
    assert run.mean_response_s == pytest.approx(
        sum(s.end - s.submit for s in run.stages) / 46)
    assert run.mean_wait_s == pytest.approx(
        sum(s.start - s.eligible for s in run.stages) / 46)
    assert sum(run.workflow_runtime_s.values()) == pytest.approx(
        sum(s.end - s.start for s in run.stages))
    assert run.cpu_util == pytest.approx(run.busy_core_seconds / run.held_core_seconds)


def test_walltime_overruns_and_kills():
    # Guests at 90 % leave I/O-bound hosts 10 % of their cores: they overrun their walltime
    # (at scale 0.5: below it the walltimes' fixed 5 s margin hides the slowdown).
    soft = run_paper(64, "static", scale=0.5, static_fraction=0.9)
    assert soft.overruns > 0 and soft.timeouts == 0 and soft.completed == 46
    hard = run_paper(64, "static", scale=0.5, static_fraction=0.9, kill_at_walltime=True)
    assert hard.timeouts > 0 and hard.completed < 46
    # A killed stage's successors fail and never wait: they leave the wait average.
    failed = [s for s in hard.stages if s.state == "failed"]
    assert failed and all(s.eligible is None for s in failed)
    assert len(hard.outcome_ids) == len(set(hard.outcome_ids)) == 46


def test_nodes_split_the_cluster():
    assert cluster_nodes(128, 64) == {"n1": 64, "n2": 64}
    run = run_paper(128, "static", scale=SCALE, node_cores=64)
    assert run.completed == 46 and run.peak_held_cores <= 128
    for bad, match in (((0,), "positive"), ((32,), "largest job"), ((128, 32), "node cores"),
                       ((96, 64), "multiple")):
        with pytest.raises(InvalidInput, match=match):
            cluster_nodes(*bad)


def test_learning_carries_over_through_the_recorder():
    recorder = MemoryRecorder()
    run_paper(64, "asax", scale=SCALE, recorder=recorder, tag="r0")
    first = set(recorder.decisions)
    assert first and recorder.classes
    run_paper(64, "asax", scale=SCALE, repeat_index=1, recorder=recorder, tag="r1")
    # The second run continued the learner: new decision ids follow the first run's.
    assert min(set(recorder.decisions) - first) > max(first)


def test_experiment_and_summary():
    runs = run_experiment([64], POLICIES, repeat=2, scale=SCALE)
    assert [(r.policy, r.repeat) for r in runs] == [(p, k) for p in POLICIES for k in (0, 1)]
    summary = summarise(runs)
    assert [s["policy"] for s in summary] == list(POLICIES)
    ss = summary[0]
    assert ss["repeats"] == 2 and ss["paper"]["mean_wait_h"] == PAPER_TABLE3[("space-sharing", 64)][0]
    norm = normalised_runtimes(summary)[64]
    assert norm["space-sharing"] == {k: 1.0 for k in ("montage", "blast", "statistics", "synthetic")}
    text = report(summary)
    assert "64 cores (the paper's load 8x)" in text and "montage" in text
    fresh = run_experiment([64], ["asax"], repeat=1, scale=SCALE, carry_learning=False)
    assert fresh[0].learning == "fresh"


# -- the command line -----------------------------------------------------------------------

RUN_KEYS = {"cores", "policy", "repeat", "makespan_s", "mean_wait_s", "mean_response_s",
            "cpu_util", "coallocations", "timeouts", "workflow_runtime_s"}


def test_cli_json_shape():
    result = cosched("simulate", "paper", "--cores", "64", "--repeat", "2", "--scale", str(SCALE),
                     "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # The three policies and the oracle (the default --policies since issue 19).
    assert len(out["runs"]) == 8
    for run in out["runs"]:
        assert RUN_KEYS <= set(run)
        assert len(run["workflow_runtime_s"]) == 15
    assert [(s["cores"], s["policy"]) for s in out["summary"]] == \
        [(64, p) for p in POLICIES + ("oracle",)]
    by = {s["policy"]: s for s in out["summary"]}
    assert by["oracle"]["oracle_share"] is None and "oracle_share" in by["asax"]
    assert out["summary"][0]["paper"]["cpu_util"] == pytest.approx(0.53)
    assert out["settings"]["asax_learning"].startswith("carried")
    assert "virtual runs" in result.stderr


def test_cli_table():
    result = cosched("simulate", "paper", "--cores", "64", "--repeat", "1", "--scale", str(SCALE),
                     "--policies", "slurm,asax")
    assert result.exit_code == 0, result.output
    assert "space-sharing" in result.stdout and "asax" in result.stdout
    assert "vs space sharing" in result.stdout and "carried over" in result.stdout


@pytest.mark.parametrize("cores, message", [
    ("0", "positive integer"), ("-64", "positive integer"), ("abc", "not a whole number"),
    ("32", "largest job"), ("64,", "not a whole number"), ("1.5", "not a whole number"),
])
def test_cli_bad_cores(cores, message):
    result = cosched("simulate", "paper", "--cores", cores, "--scale", str(SCALE))
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_cli_loan_rule_reaches_the_controller_and_a_bad_one_is_refused():
    """``--loan-rule sooner`` is run (and said in the settings); on the paper's workload it
    refuses some of the half rule's loans, so its runs differ from ``share`` at the same floor."""
    outs = {}
    for rule in ("share", "sooner"):
        r = cosched("simulate", "paper", "--cores", "128", "--repeat", "3", "--seed", "7",
                    "--policies", "asax", "--loan-min-share", "0.5", "--loan-rule", rule,
                    "--workers", "1", "--json")
        assert r.exit_code == 0, r.output
        outs[rule] = json.loads(r.stdout)
        assert outs[rule]["settings"]["loan_rule"] == rule
    assert [x["mean_response_s"] for x in outs["share"]["runs"]] != \
        [x["mean_response_s"] for x in outs["sooner"]["runs"]]
    r = cosched("simulate", "paper", "--loan-rule", "soon")
    assert r.exit_code == 2 and "--loan-rule" in r.output and "Traceback" not in r.output


def test_cli_bad_policy_and_scale():
    r = cosched("simulate", "paper", "--policies", "fifo")
    assert r.exit_code == 2 and "unknown co-allocation policy" in r.output
    r = cosched("simulate", "paper", "--scale", "-1")
    assert r.exit_code == 2 and "--scale" in r.output
    r = cosched("simulate", "paper", "--node-cores", "48", "--cores", "96")
    assert r.exit_code == 2 and "--node-cores" in r.output


def test_cli_db_keeps_learning(tmp_path):
    from coscheduler.store import SqliteStore

    db = tmp_path / "paper.db"
    args = ("simulate", "paper", "--cores", "64", "--repeat", "1", "--scale", str(SCALE),
            "--policies", "asax", "--db", str(db), "--json")
    first = cosched(*args)
    assert first.exit_code == 0, first.output
    store = SqliteStore(db, readonly=True)
    try:
        loaded = store.load()
    finally:
        store.close()
    assert loaded.classes and loaded.observed
    assert not loaded.pending   # every host ended: every decision got its loss
    assert json.loads(first.stdout)["settings"]["db"] == str(db)


# -- issue #10: geometry, mechanism, learning, report ------------------------------------------

def test_the_workload_keeps_table2s_utilisation_ranges_and_runtime_proportions():
    """Space sharing, the paper's geometry: each kind's CPU use of its held cores lies in
    Table 2's Slurm range and the kinds' mean total runtimes keep the paper's proportions
    (Montage 0.32 : BLAST 0.71 : Statistics 0.70 : Synthetic 0.49 h) within 25 %."""
    paper = {"montage": (0.21, 0.45, 0.32), "blast": (0.91, 0.96, 0.71),
             "statistics": (0.10, 0.26, 0.70), "synthetic": (0.98, 1.0, 0.49)}
    cpu, held, runtime = {}, {}, {}
    for s in paper_workload(1.0):
        p, k = s.profile, s.kind
        cpu[k] = cpu.get(k, 0.0) + p.cpu_util * s.job.cores * p.alone_runtime_s
        held[k] = held.get(k, 0.0) + s.job.cores * p.alone_runtime_s
        runtime.setdefault(k, {}).setdefault(s.workflow, 0.0)
        runtime[k][s.workflow] += p.alone_runtime_s
    mean = {k: sum(v.values()) / len(v) for k, v in runtime.items()}
    for k, (low, high, hours) in paper.items():
        assert low <= cpu[k] / held[k] <= high, (k, cpu[k] / held[k])
        ours = mean[k] / sum(mean.values())
        theirs = hours / sum(h for _, _, h in paper.values())
        assert 0.75 <= ours / theirs <= 1.25, (k, ours / theirs)


def _run_controller(policy, cores=64, scale=SCALE):
    from coscheduler.backends.virtual import VirtualBackend
    from coscheduler.backends.interference import CALIBRATED
    from coscheduler.controller import Controller, ControllerConfig
    from coscheduler.experiments.paper import submission_order

    stages = paper_workload(scale)
    b = VirtualBackend(cluster_nodes(cores), kill_at_walltime=False, model=CALIBRATED)
    for s in stages:
        b.submit(s.job, s.profile)
    c = Controller(b, policy, MemoryRecorder(), submission_order(stages),
                   ControllerConfig(decline_cooldown_s=30.0 * scale))
    b.run_until_idle(c, tick_s=10.0 * scale)
    return [(o.job_id, o.state, round(o.start_time, 9), round(o.end_time, 9)) for o in b.history]


def test_with_coallocation_off_the_result_equals_space_sharing():
    """ASA_X whose only expert always says a_0 never co-allocates: every stage starts and
    ends exactly as under space sharing (the co-allocation path changes nothing else)."""
    from coscheduler.learner import AsaxLearner, LearnerConfig
    from coscheduler.policies.coalloc import Asax, SpaceSharing
    from fixed_experts import OneActionPerClass

    never = Asax(AsaxLearner(LearnerConfig(), expert_factory=lambda: [OneActionPerClass({})]))
    off = _run_controller(never)
    assert off == _run_controller(SpaceSharing())
    assert never.learner.known_classes()           # it was asked, and declined every time


def test_a_seed_makes_a_run_repeatable_and_another_seed_changes_asax():
    def runs(seed):
        return [{k: v for k, v in r.as_json().items() if k != "seed"}
                for r in run_experiment([64], POLICIES, repeat=2, scale=SCALE, seed=seed)]
    first = runs(3)
    assert runs(3) == first
    other = runs(4)
    assert [r for r in other if r["policy"] != "asax"] == [r for r in first if r["policy"] != "asax"]
    assert [r for r in other if r["policy"] == "asax"] != [r for r in first if r["policy"] == "asax"]


def test_scale_out_multiplies_the_workflows_and_the_cluster():
    run = run_paper(64, "static", scale=SCALE, scale_out=2)
    assert len(run.stages) == 92 and len(run.workflow_runtime_s) == 30
    assert "montage-8.1" in run.workflow_runtime_s and run.scale_out == 2
    assert 64 < run.peak_held_cores <= 128 and run.completed == 92
    assert run.as_json()["scale_out"] == 2
    with pytest.raises(InvalidInput, match="scale_out"):
        run_paper(64, "static", scale=SCALE, scale_out=0)


def test_the_new_rules_find_more_hosts_than_the_old_ones_and_explain_the_rest():
    from coscheduler.controller.hosts import REFUSALS

    new = run_paper(64, "static", scale=SCALE, explain=True)
    old = run_paper(64, "static", scale=SCALE, explain=True, old_rules=True)
    assert new.coallocations > old.coallocations
    assert "former guests" in old.refusals or "guest slots full" in old.refusals
    assert "former guests" not in new.refusals and "guest slots full" not in new.refusals
    for run in (new, old):
        assert set(run.refusals) <= set(REFUSALS)
        waited = sum(s.start - s.eligible for s in run.stages if s.eligible is not None)
        assert 0 < sum(run.refusals.values()) <= waited + 1e-6


def test_asax_closes_rounds_over_repetitions_and_reports_them():
    runs = run_experiment([64], ["asax"], repeat=3, scale=SCALE)
    closed = [r.rounds_closed for r in runs]
    assert closed == sorted(closed) and closed[-1] >= 1
    history = [h for r in runs for h in r.weight_history]
    assert len(history) == closed[-1]
    moved = 0
    for h in history:
        # A round closes when its host ends; the weights move unless every expert's risk
        # was the same (no loss told them apart: a host that was not slowed).
        if max(h["risk"]) > min(h["risk"]):
            assert h["weights_after"] != h["weights_before"]
            moved += 1
        else:
            assert h["weights_after"] == pytest.approx(h["weights_before"])
        assert sum(h["weights_after"]) == pytest.approx(1.0)
    assert moved >= 1
    assert all(r.mean_slowdown >= -1e-9 for r in runs)


def test_time_weighted_slowdown_is_extra_runtime_over_runtime_alone():
    from coscheduler.experiments.paper import paper_workload

    (run,) = run_experiment([64], ["static"], repeat=1, scale=SCALE)
    alone = {s.job.job_id: s.profile.alone_runtime_s for s in paper_workload(SCALE, "c64-r0")}
    shared = {s.job_id for s in run.stages if s.host} | {s.host for s in run.stages if s.host}
    done = [s for s in run.stages if s.job_id in shared and s.state == "completed"]
    assert done and len(done) == run.colocated
    extra = sum((s.end - s.start) - alone[s.job_id] for s in done)
    assert run.weighted_slowdown == pytest.approx(extra / sum(alone[s.job_id] for s in done))
    per_stage = sum((s.end - s.start) / alone[s.job_id] - 1 for s in done) / len(done)
    assert run.mean_slowdown == pytest.approx(per_stage)
    # The same mean over the hosts alone and over the guests alone.
    hosts = {s.host for s in run.stages if s.host}
    for role, mine in (("host", [s for s in done if s.job_id in hosts]),
                       ("guest", [s for s in done if s.host])):
        assert mine, role
        want = sum((s.end - s.start) / alone[s.job_id] - 1 for s in mine) / len(mine)
        assert getattr(run, f"{role}_slowdown") == pytest.approx(want), role
    assert run.as_json()["host_slowdown"] == pytest.approx(run.host_slowdown, abs=1e-4)


def test_a_run_without_guests_has_no_host_or_guest_slowdown_and_the_report_says_so():
    runs = run_experiment([64], ["space-sharing", "static"], repeat=1, scale=SCALE)
    by = {r.policy: r for r in runs}
    assert by["space-sharing"].host_slowdown is None and by["space-sharing"].guest_slowdown is None
    assert by["static"].host_slowdown is not None and by["static"].guest_slowdown is not None
    rows = summarise(runs)
    assert [r["host_slowdown"] is None for r in rows] == [True, False]
    text = report(rows)
    hosts_line = next(line for line in text.splitlines() if line.strip().startswith("hosts"))
    assert hosts_line.split()[1] == "-" and "%" in hosts_line


def test_cli_json_gains_slowdown_rounds_and_writes_plots(tmp_path):
    result = cosched("simulate", "paper", "--cores", "64", "--repeat", "2", "--scale", str(SCALE),
                     "--json", "--out", str(tmp_path / "out"), "--explain")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for run in out["runs"]:
        assert {"mean_slowdown", "rounds_closed", "scale_out", "refusals"} <= set(run)
        assert (run["rounds_closed"] is None) == (run["policy"] != "asax")
    assert out["settings"]["experts"] == ["pair"] and out["settings"]["model"] == "calibrated"
    # issue 19: a Gantt-style timeline per policy, beside the summary plots
    policies = out["settings"]["policies"]
    assert {"space-sharing", "asax", "oracle"} <= set(policies)
    timelines = [f"timeline-64-{p}.png" for p in policies]
    for name in ("makespan.png", "runtime.png", "weights-64.png", *timelines):
        data = (tmp_path / "out" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    assert json.loads((tmp_path / "out" / "result.json").read_text())["runs"] == out["runs"]
    # ASA_X learns per workflow kind and stage by default (issue 19, item 3)
    assert out["settings"]["classes"] == "stage"
    # "oracle's gain taken": (space sharing's mean response - the policy's) over (space
    # sharing's - the oracle's), from the same summary rows
    rows = {r["policy"]: r for r in out["summary"] if r["cores"] == 64}
    base, oracle = rows["space-sharing"]["mean_response_s"], rows["oracle"]["mean_response_s"]
    assert oracle < base
    for policy in ("static", "asax"):
        share = (base - rows[policy]["mean_response_s"]) / (base - oracle)
        assert rows[policy]["oracle_share"] == pytest.approx(share, abs=1e-3), policy
    assert rows["space-sharing"]["oracle_share"] is None and rows["oracle"]["oracle_share"] is None


def test_cli_refuses_unknown_experts_and_models():
    r = cosched("simulate", "paper", "--experts", "oracle")
    assert r.exit_code != 0 and "unknown expert 'oracle'" in r.output
    r = cosched("simulate", "paper", "--model", "magic")
    assert r.exit_code != 0 and "magic" in r.output


# -- the oracle (issue 19 item 4) -------------------------------------------------------------------

from coscheduler.experiments import paper as paper_exp  # noqa: E402

@pytest.mark.parametrize("cores", [64, 128, 256])
@pytest.mark.parametrize("scale", [SCALE, 1.0])
def test_the_oracle_never_loses_to_space_sharing(cores, scale):
    """Lending true idle shares without interference can only start jobs earlier: the
    oracle's makespan and mean response never exceed space sharing's, and it lends."""
    ss = paper_exp.run_paper(cores, "space-sharing", scale=scale)
    orc = paper_exp.run_paper(cores, "oracle", scale=scale)
    assert orc.coallocations > 0 and orc.failed == 0 and orc.overruns == 0
    assert orc.makespan_s <= ss.makespan_s * (1 + 1e-9)
    assert orc.mean_response_s <= ss.mean_response_s * (1 + 1e-9)


def test_the_oracle_refuses_a_bad_true_use():
    from coscheduler.model import InvalidInput
    from coscheduler.policies.oracle import Oracle

    with pytest.raises(InvalidInput, match="true CPU use of job j"):
        Oracle({"j": 0.0})
