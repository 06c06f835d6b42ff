"""`cosched bench learner` runs and prints the documented figures (a short run; the
real figures come from the default 10,000 decisions)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from coscheduler.bench.learner import host_stream, synthetic_loss
from coscheduler.cli import main


def test_bench_learner_json_shape():
    result = CliRunner().invoke(main, ["bench", "learner", "--decisions", "400", "--json",
                                       "--store-writes", "20"])
    assert result.exit_code == 0, (result.output, result.exception)
    data = json.loads(result.output)
    assert data["decisions"] == 400 and data["m"] == 10
    assert data["experts"] == ["cpu", "mem", "stage", "elapsed"]
    for key in ("decision_median_us", "decision_p99_us", "update_median_us"):
        assert isinstance(data[key], float) and data[key] > 0
    assert data["decision_p99_us"] >= data["decision_median_us"]
    assert data["updates"] > 300 and data["rounds_closed"] >= 1
    assert data["fitted"]["experts"][-1] == "fitted"
    assert data["store"]["FULL"]["writes"] == 20


def test_bench_learner_human():
    result = CliRunner().invoke(main, ["bench", "learner", "--decisions", "200", "--no-fitted",
                                       "--store-writes", "0"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "200 decisions" in result.output and "budget: decision median < 1000 us" in result.output
    assert all(len(line) <= 80 for line in result.output.splitlines())


def test_stream_is_seeded_and_varied():
    a, b = host_stream(500, 3), host_stream(500, 3)
    assert a == b and a != host_stream(500, 4)
    assert {s.state.job_class for s in a} >= {"montage/mProject", "blast/blastall"}
    assert any(s.state.happiness is None for s in a) and any(s.state.cpu_percent > 75 for s in a)
    assert synthetic_loss(a[0].state, 0.0, 0.0) == 0.0
