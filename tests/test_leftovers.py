"""What `cosched demo` and `cosched bench agent` leave behind (issue 8, item 14): their temp
folders go away whether they succeed or fail at once; the folder of a demo killed with
SIGKILL is tidied by the next demo. (The cgroups a killed demo leaves, quotas included,
are removed by the next local backend that starts: test_local_backend.py::
test_jobs_die_with_the_backend_process.) Each test points the temp directory at a private
folder, since other runs on the machine make such folders too."""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from click.testing import CliRunner

from coscheduler.cli import main

pytestmark = pytest.mark.root


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_a_demo_that_fails_at_once_leaves_no_work_folder(private_tmp, tmp_path):
    garbage = tmp_path / "not-a.db"
    garbage.write_bytes(b"certainly not sqlite" * 10)
    r = CliRunner().invoke(main, ["demo", "--db", str(garbage)])
    assert r.exit_code == 1 and "not an SQLite database" in r.output
    assert list(private_tmp.iterdir()) == []


def test_the_folder_of_a_killed_demo_is_tidied_by_the_next_one(private_tmp, tmp_path):
    dead = private_tmp / f"cosched-demo-{2 ** 22 + 9}-abcd"   # no such pid can exist
    alive = private_tmp / f"cosched-demo-{os.getpid()}-efgh"  # a demo that still runs
    for d in (dead, alive):
        (d / "logs").mkdir(parents=True)
    other = private_tmp / "cosched-demo-notes"                 # not a demo's folder
    other.mkdir()
    garbage = tmp_path / "not-a.db"
    garbage.write_bytes(b"certainly not sqlite" * 10)
    r = CliRunner().invoke(main, ["demo", "--db", str(garbage)])
    assert r.exit_code == 1
    assert not dead.exists() and alive.exists() and other.exists()


def test_bench_agent_leaves_no_folder(private_tmp):
    r = CliRunner().invoke(main, ["bench", "agent", "--jobs", "2", "--seconds", "0.5",
                                  "--interval", "0.2", "--requests", "5", "--json"])
    assert r.exit_code == 0, r.output
    assert list(private_tmp.iterdir()) == []
    end = json.loads(r.output)["all_jobs_end"]     # every job ended at once, all retired
    assert end["jobs"] == end["retired"] == 2 and end["agent_cpu_ms"] >= 0
