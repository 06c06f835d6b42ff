"""MRSch's S1-S10 generator and its file format (coscheduler/multi/workload.py)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.model import InvalidInput
from coscheduler.multi import workload as mw
from coscheduler.sim.swf import read_swf



@pytest.fixture(scope="module")
def lublin(lublin_swf):
    return read_swf(lublin_swf)


@pytest.mark.parametrize("name", list(mw.SETS))
def test_sets_hit_their_shares_and_ranges(lublin, name):
    spec = mw.SETS[name]
    wl = mw.generate(lublin, name, seed=3)
    s = mw.shares(wl)
    assert abs(s["bb_share"] - spec.bb_share) <= 0.01
    scale = lublin.max_nodes / mw.THETA_NODES
    assert wl.machine.burst_buffer_gb == round(1_260_000 * scale)
    lo, hi = (round(x * 1000 * scale) for x in spec.bb_range_tb)
    sizes = [r.burst_buffer_gb for r in wl.requests if r.burst_buffer_gb]
    assert min(sizes) >= lo and max(sizes) <= hi
    # uniform over the range: the mean sits near the middle
    assert abs(sum(sizes) / len(sizes) - (lo + hi) / 2) < 0.03 * (hi - lo)
    base = [j.procs for j in lublin.jobs]
    procs = [j.procs for j in wl.jobs]
    assert procs == ([-(-p // 2) for p in base] if spec.halve_nodes else base)
    if spec.power:
        assert wl.machine.power_budget_w == round(500_000 * scale)
        assert wl.machine.idle_power_w == 60
        pool = wl.machine.power_budget_w - 60 * lublin.max_nodes
        for r, p in zip(wl.requests, procs):
            assert 60 < r.power_w_per_node <= 215
            assert p * (r.power_w_per_node - 60) <= pool  # every job can run
        assert sum(r.power_w_per_node < 100 for r in wl.requests) <= wl.power_capped
    else:
        assert all(r.power_w_per_node == 0 for r in wl.requests)


def test_deterministic_for_a_seed_and_different_across_seeds(lublin):
    a = mw.generate(lublin, "S4", seed=1)
    b = mw.generate(lublin, "S4", seed=1)
    c = mw.generate(lublin, "S4", seed=2)
    assert a.requests == b.requests and a.jobs == b.jobs
    assert a.requests != c.requests


def test_power_sets_keep_the_burst_buffer_draws(lublin):
    s1 = mw.generate(lublin, "S1", seed=5)
    s6 = mw.generate(lublin, "S6", seed=5)
    assert [r.burst_buffer_gb for r in s1.requests] == [r.burst_buffer_gb for r in s6.requests]


def test_file_round_trip(tmp_path, lublin):
    wl = mw.generate(lublin, "S7", seed=1)
    out = tmp_path / "s7.swf"
    mw.write(wl, out)
    back = mw.read(out)
    assert back.requests == wl.requests
    assert [(j.job_id, j.submit, j.run, j.procs, j.estimate) for j in back.jobs] == \
        [(j.job_id, j.submit, j.run, j.procs, j.estimate) for j in wl.jobs]
    assert back.machine == wl.machine and back.set_name == "S7" and back.seed == 1
    # the first 18 columns are plain SWF
    plain = tmp_path / "plain.swf"
    plain.write_text("\n".join(" ".join(line.split()[:18]) if not line.startswith(";") else line
                               for line in out.read_text().splitlines()))
    assert len(read_swf(plain).jobs) == len(wl.jobs)


@pytest.mark.parametrize("bad, message", [
    ("-5", "burst buffer request (GB) must be >= 0"),
    ("nan", "field 'burst buffer (GB)' is not finite"),
    ("2.5", "must be a whole number"),
])
def test_bad_requests_name_the_job(tmp_path, bad, message):
    f = tmp_path / "bad.swf"
    f.write_text("; MaxNodes: 4\n; BurstBufferGB: 100\n"
                 "1 0 -1 10 1 -1 -1 1 10 -1 1 1 -1 -1 -1 -1 -1 -1 5 0 0\n"
                 f"7 0 -1 10 1 -1 -1 1 10 -1 1 1 -1 -1 -1 -1 -1 -1 {bad} 0 0\n")
    with pytest.raises(InvalidInput) as e:
        mw.read(f)
    assert message in str(e.value)
    assert "job 7" in str(e.value) or "bad.swf:4:" in str(e.value)


def test_plain_swf_is_refused_with_the_line(tmp_path):
    f = tmp_path / "plain.swf"
    f.write_text("; MaxNodes: 4\n1 0 -1 10 1 -1 -1 1 10 -1 1 1 -1 -1 -1 -1 -1 -1\n")
    with pytest.raises(InvalidInput, match=r"plain.swf:2: expected 21 fields, found 18"):
        mw.read(f)


def test_unknown_set_and_bad_seed(lublin):
    with pytest.raises(InvalidInput, match="unknown workload set 'S11'"):
        mw.generate(lublin, "S11")
    with pytest.raises(InvalidInput, match="seed"):
        mw.generate(lublin, "S1", seed=-1)


def test_cli_writes_the_file(tmp_path, lublin_swf):
    out = tmp_path / "s4.swf"
    r = CliRunner().invoke(main, ["workload", "multi", "--from", str(lublin_swf), "--set", "S4",
                                  "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    import json
    summary = json.loads(r.output)
    assert summary["set"] == "S4" and summary["jobs"] == 10000
    assert math.isclose(summary["bb_share"], 0.75)
    assert len(mw.read(out).jobs) == 10000
    r = CliRunner().invoke(main, ["workload", "multi", "--from", str(lublin_swf), "--set", "S0",
                                  "--out", str(out)])
    assert r.exit_code != 0 and "unknown workload set 'S0'" in r.output
