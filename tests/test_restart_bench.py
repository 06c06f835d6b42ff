"""`cosched bench restart`: runs small, prints the documented JSON shape; the state
database it writes restarts a controller with the learner it recorded."""

from __future__ import annotations

import json

from click.testing import CliRunner

from coscheduler.bench.restart import CLASSES, write_database
from coscheduler.cli import main
from coscheduler.store.sqlite import SqliteStore


def test_bench_restart_json_shape_on_a_small_case():
    r = CliRunner().invoke(main, ["bench", "restart", "--json", "--decisions", "200",
                                  "--repeat", "1", "--whole"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["decisions"], out["repeat"]) == (200, 1) and out["database_mb"] > 0
    for mode in ("partial", "whole"):
        assert set(out[mode]) == {"wall_s", "cpu_s", "max_rss_mb"}
        assert out[mode]["wall_s"] > 0 and out[mode]["max_rss_mb"] > 0


def test_the_bench_database_holds_what_it_says(tmp_path):
    write_database(tmp_path / "s.db", 120)
    loaded = SqliteStore(tmp_path / "s.db", readonly=True).load(
        observed_per_class=7, related_to=(set(), 1e9))
    assert loaded.observed_counts == dict.fromkeys(CLASSES, 30)
    assert len(loaded.observed) == 4 * 7 and loaded.pending == []
    assert loaded.next_decision_id == 121 and loaded.related == []


def test_bench_restart_refuses_a_database_of_no_decisions():
    r = CliRunner().invoke(main, ["bench", "restart", "--decisions", "0"])
    assert r.exit_code != 0 and "--decisions" in r.output
