"""A learned model is used only on the machine it was trained for (issue 20: "a model for
another trace's machine size ... gets a clear error naming the file, never a traceback"):
the header's ``machine`` against the trace's, at use time (learned/machine.py), in the
library and on the command line; the shipped models' headers carry the machine their gate
report names. numpy only."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.learned.evaluate import inspector_figures, model_figures, window_bsld
from coscheduler.learned.gate import report_path
from coscheduler.learned.modelfile import ModelError, load_model, save_model
from coscheduler.learned.registry import MODELS_DIR, shipped
from coscheduler.learned.selectors import LearnedInspector, LearnedScorer
from coscheduler.model import InvalidInput
from coscheduler.sim.swf import read_swf

from learned_helpers import write_stuck_shorts_trace
from test_learned_models import inspector_model, rl_model

STUCK = {"nodes": 4, "procs_per_node": 1}      # write_stuck_shorts_trace's machine
OTHER = {"nodes": 256, "procs_per_node": 1}    # lublin_256's


@pytest.fixture(scope="module")
def stuck_path(tmp_path_factory):
    # 2,100 jobs: enough for the seed-1 and held-out windows of the report
    return write_stuck_shorts_trace(tmp_path_factory.mktemp("swf") / "stuck.swf", cycles=300)


@pytest.fixture(scope="module")
def stuck(stuck_path):
    return read_swf(stuck_path)


def scorer_file(tmp_path, name: str, machine: dict | None):
    extra = {} if machine is None else {"machine": machine}
    return save_model(rl_model(3, name=name, trace="stuck.swf", backfill="none",
                               sequence_jobs=512, **extra), tmp_path / f"{name}.model")


def inspector_file(tmp_path, name: str, machine: dict):
    model = inspector_model(50.0, "SJF")
    model.header.update(name=name, trace="stuck.swf", backfill="none", machine=machine)
    return save_model(model, tmp_path / f"{name}.model")


def one_line_cli_error(result, *names: str) -> str:
    """A click error: non-zero exit, no traceback, one line naming ``names``."""
    text = result.output   # stdout and stderr
    assert result.exit_code != 0, text
    assert "Traceback" not in text and isinstance(result.exception, SystemExit), \
        (text, result.exception)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    for name in names:
        assert name in lines[0], text
    return lines[0]


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_library_replays_refuse_a_model_for_another_machine(tmp_path, stuck):
    other = load_model(scorer_file(tmp_path, "big", OTHER))
    scorer = LearnedScorer(other)
    message = r"big.model: trained for a machine of 256 nodes x 1 processors, but " \
              r"stuck.swf has 4 x 1"
    with pytest.raises(ModelError, match=message):
        window_bsld(stuck, scorer, "none", [0], jobs=64)
    with pytest.raises(ModelError, match=message):
        model_figures(other, stuck, "none")
    ins = load_model(inspector_file(tmp_path, "big-sjf", OTHER))
    with pytest.raises(ModelError, match=r"big-sjf.model: trained for a machine of 256"):
        inspector_figures(stuck, LearnedInspector(ins), "none")
    # the same model on the machine it names, a model without "machine" (trained before
    # training wrote it) and the cross-trace table's deliberate other machine are replayed
    mine = LearnedScorer(load_model(scorer_file(tmp_path, "mine", STUCK)))
    older = LearnedScorer(load_model(scorer_file(tmp_path, "older", None)))
    for policy in (mine, older):
        assert len(window_bsld(stuck, policy, "none", [0], jobs=64)) == 1
    assert len(window_bsld(stuck, scorer, "none", [0], jobs=64, other_machine=True)) == 1


def test_a_malformed_header_machine_is_named_at_use(tmp_path, stuck):
    path = scorer_file(tmp_path, "odd", {"nodes": "4", "procs_per_node": 1})
    with pytest.raises(ModelError, match=r"odd.model: the header's machine .* is not"):
        window_bsld(stuck, LearnedScorer(load_model(path)), "none", [0], jobs=64)
    line = one_line_cli_error(run("simulate", "swf", str(stuck.path), "--jobs", "64",
                                  "--policy", f"rl:{path}"), "odd.model")
    assert "procs_per_node" in line


def test_simulate_swf_refuses_a_model_for_another_machine_in_one_line(tmp_path, stuck_path):
    mine = scorer_file(tmp_path, "mine", STUCK)
    ok = run("simulate", "swf", str(stuck_path), "--jobs", "64", "--policy",
             f"SJF,rl:{mine}", "--json")
    assert ok.exit_code == 0, ok.output
    assert [r["policy"] for r in json.loads(ok.stdout)] == ["SJF", f"rl:{mine}"]
    big = scorer_file(tmp_path, "big", OTHER)
    r = run("simulate", "swf", str(stuck_path), "--jobs", "64", "--policy", f"SJF,rl:{big}")
    line = one_line_cli_error(r, "big.model", "256 nodes x 1 processors", "stuck.swf has 4 x 1")
    assert line.startswith("Error: ")
    ins = inspector_file(tmp_path, "big-sjf", OTHER)
    one_line_cli_error(run("simulate", "swf", str(stuck_path), "--jobs", "64",
                           "--inspector", str(ins)), "big-sjf.model", "256 nodes", "4 x 1")
    # a shipped model on another machine's trace: the same one line
    one_line_cli_error(run("simulate", "swf", str(stuck_path), "--jobs", "64", "--policy",
                           "rl:lublin256"), "lublin256.model", "256 nodes", "stuck.swf")


def test_simulate_learned_refuses_a_model_in_its_own_traces_table(tmp_path, stuck_path,
                                                                 monkeypatch):
    # a model named as stuck.swf's own but recording another machine: its table is refused
    # (the cross-trace table alone runs models on other machines)
    import coscheduler.learned.registry as registry

    row = {"name": "big", "kind": "rlscheduler", "trace": "stuck.swf", "backfill": "none",
           "path": str(scorer_file(tmp_path, "big", OTHER))}
    monkeypatch.setattr(registry, "list_models", lambda *a, **k: [row])
    r = run("simulate", "learned", "--traces", str(stuck_path), "--workers", "1",
            "--out", str(tmp_path / "rep"))
    one_line_cli_error(r, "big.model", "256 nodes", "stuck.swf has 4 x 1")
    from coscheduler.learned.report import build_report

    with pytest.raises(InvalidInput, match=r"big.model: trained for a machine of 256"):
        build_report([stuck_path], [row], workers=1)


def test_every_shipped_model_records_the_machine_its_gate_report_names():
    files = shipped(MODELS_DIR)
    assert len(files) >= 14
    for path in files:
        header = load_model(path).header
        report = json.loads(report_path(path).read_text())
        assert report["model"] == path.name and report["trace"] == header["trace"], path.name
        assert header.get("machine") == report["machine"], path.name


def test_nan_features_given_to_an_mrsch_model_are_an_error_naming_its_file():
    from coscheduler.multi import mrsch
    from coscheduler.multi.report import MODELS_DIR as MULTI_DIR
    from coscheduler.policies.selection import ChoiceView

    path = MULTI_DIR / "mrsch-lublin_256-S1.model"
    model = mrsch.load_model(path)
    pools = tuple(model.header["pools"])
    estimate = np.array([math.nan, 300.0])   # a job with a NaN estimate
    view = ChoiceView(kind="pick", now=1000.0, free_nodes=200,
                      total_nodes=model.header["nodes"], procs_per_node=1,
                      jobs=np.array([0, 1]), submit=np.array([400.0, 1000.0]),
                      procs=np.array([2, 4]), estimate=estimate, need=np.array([2, 4]),
                      running_end=np.array([1100.0]), running_need=np.array([56]),
                      queue_length=2)
    p = len(pools)
    view.extra = {"pool_names": pools, "pool_cap": np.full(p, 100),
                  "pool_free": np.full(p, 40), "pool_take": np.full((2, p), 10),
                  "running_take": np.full((1, p), 60), "queue_need": np.array([2, 4]),
                  "queue_take": np.full((2, p), 10), "queue_estimate": estimate}
    with pytest.raises(InvalidInput, match=r"mrsch-lublin_256-S1.model: NaN or infinite features"):
        mrsch.MRSchAgent(model).choose(view)
