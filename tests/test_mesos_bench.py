"""`cosched bench mesos`: the offer and gang runs go through the real driver and the emulated
master (its own process), the scripted run through a streaming script; the documented
shape is printed (docs/cli-json.md)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mesos_framework.bench import bench_scripted
from coscheduler.cli import main


def test_scripted_bench_handles_every_offer_and_launches_every_gang():
    r = bench_scripted(offers=500, gangs=5)
    assert r["offers"] == 500 and r["offers_per_s"] > 0
    assert r["gangs"] == 5 and r["gang_accept_median_ms"] >= 0


@pytest.mark.mesos
@pytest.mark.root
def test_cli_json_shape_through_the_emulated_master():
    out = CliRunner().invoke(main, ["bench", "mesos", "--agents", "8", "--seconds", "1", "--gangs", "4",
                                    "--offers", "200", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert set(data) >= {"offers_per_s", "gang_accept_median_ms", "master", "offer_run", "gang_run",
                         "scripted", "load_average"}
    assert data["master"] == "emulator"
    assert isinstance(data["offers_per_s"], float) and isinstance(data["gang_accept_median_ms"], float)
    off, gang = data["offer_run"], data["gang_run"]
    # every offer received was answered (a DECLINE), and the handled ones are counted once
    assert off["offers_handled"] > 8 and off["offers_handled"] <= off["offers_received"] + 8
    assert off["framework_cpu_s"] > 0 and off["offers_per_framework_cpu_s"] > 0
    assert gang["gangs"] == 4 and gang["completed"] == 4
    assert 0 <= gang["gang_decide_median_ms"] <= gang["gang_accept_median_ms"]
