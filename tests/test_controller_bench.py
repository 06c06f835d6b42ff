"""`cosched bench controller`: runs small, prints the documented JSON shape."""

from __future__ import annotations

import json

from click.testing import CliRunner

from coscheduler.cli import main


def test_bench_controller_json_shape_on_a_small_case():
    r = CliRunner().invoke(main, ["bench", "controller", "--json", "--pending", "60",
                                  "--running", "40", "--repeat", "1"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["pending"], out["running"], out["target_ms"]) == (60, 40, 100.0)
    assert set(out["policies"]) == {"space-sharing", "static", "asax"}
    for name, p in out["policies"].items():
        assert p["cold_pass_median_ms"] > 0 and p["errors"] == 0
    assert out["policies"]["space-sharing"]["cold_coallocated"] == 0
    assert out["policies"]["static"]["cold_coallocated"] > 0


def test_bench_controller_refuses_impossible_sizes():
    r = CliRunner().invoke(main, ["bench", "controller", "--running", "0"])
    assert r.exit_code != 0 and "--running" in r.output
