"""The scaled-down workflow mix through a real Slurm cluster under two policies, through the
command line (`cosched slurm run-paper-small --json`), as the README describes. Scale 0.01:
each policy's run takes well under a minute on a quiet 2-core machine."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.root, pytest.mark.live]


def test_run_paper_small_through_real_slurm():
    from click.testing import CliRunner

    from coscheduler.cli import main
    from slurm_plugin.cluster import load_state

    if os.geteuid() != 0:
        pytest.skip("a real Slurm cluster needs root")
    d = Path(tempfile.mkdtemp(prefix="cosched-slurm-paper-"))
    os.chmod(d, 0o755)
    try:
        res = CliRunner().invoke(main, ["slurm", "run-paper-small", "--dir", str(d / "c"),
                                        "--policies", "space-sharing,static", "--scale", "0.01",
                                        "--interval", "0.5", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output[res.output.index("{"):])
        assert out["mode"] == "slurm" and [r["policy"] for r in out["results"]] == ["space-sharing", "static"]
        ss, st = out["results"]
        for r in out["results"]:
            assert r["jobs"] == 12 and r["completed"] == 12, r
            assert r["makespan_s"] > 0 and r["mean_wait_s"] >= 0
            assert 0 < r["cpu_util"] <= 1.2, r     # kernel CPU over the held cores' capacity
        assert ss["coallocations"] == 0 and ss["mean_slowdown"] == 0.0
        assert st["coallocations"] >= 1 and st["mean_slowdown"] is not None
        # the cluster it started for the run is gone again
        state = load_state(d / "c")
        assert state is not None and state.stopped is not None
        assert not any(x.alive() for x in state.daemons)
        print(json.dumps(out["results"], indent=1))
    finally:
        shutil.rmtree(d, ignore_errors=True)
