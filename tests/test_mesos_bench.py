"""`cosched bench mesos`: the scripted run goes end to end over real HTTP (offers streamed,
pooled and declined; gangs launched with their ACCEPTs) and prints the documented shape."""

from __future__ import annotations

import json

from click.testing import CliRunner

from coscheduler.bench.mesos import bench_scripted
from coscheduler.cli import main


def test_scripted_bench_handles_every_offer_and_launches_every_gang():
    r = bench_scripted(offers=500, gangs=5)
    assert r["offers"] == 500 and r["offers_per_s"] > 0
    assert r["gangs"] == 5 and r["gang_accept_median_ms"] >= 0


def test_cli_json_shape():
    out = CliRunner().invoke(main, ["bench", "mesos", "--offers", "200", "--gangs", "3",
                                    "--seconds", "3", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert set(data) >= {"offers_per_s", "gang_accept_median_ms", "master", "emulator", "scripted"}
    assert isinstance(data["offers_per_s"], float) and isinstance(data["gang_accept_median_ms"], float)
