"""The shared model refuses bad input with errors that name the input."""

import math

import pytest
from click.testing import CliRunner

from coscheduler import __version__
from coscheduler.cli import main
from coscheduler.model import (InvalidInput, Job, MetricsSample, StageType, validate_job_class,
                               validate_job_id)
from coscheduler.progress import read_progress, write_progress


def job(**kw):
    base = dict(job_id="j1", cores=4, walltime_s=60.0, job_class="blast/map")
    base.update(kw)
    return Job(**base)


def test_job_defaults_and_core_split():
    j = job(cores=5, nodes=2, stage_type="sequential")
    assert j.stage_type is StageType.SEQUENTIAL
    assert j.cores_per_node() == [3, 2]


@pytest.mark.parametrize("kw,match", [
    (dict(cores=0), "cores"), (dict(cores=2.5), "cores"), (dict(walltime_s=0), "walltime_s"),
    (dict(walltime_s=-3), "walltime_s"), (dict(walltime_s=math.nan), "walltime_s"),
    (dict(nodes=5), "nodes"), (dict(tasks=0), "tasks"), (dict(stage_type="serial"), "stage_type"),
    (dict(job_id="../../etc"), "job id"), (dict(job_id=""), "job id"),
    (dict(job_class="a/../b"), "job class"), (dict(depends_on=("ok", "bad/id")), "dependency"),
])
def test_job_refuses_bad_fields(kw, match):
    with pytest.raises(InvalidInput, match=match):
        job(**kw)


@pytest.mark.parametrize("kw,match", [
    (dict(cpu_percent=math.nan), "cpu_percent"), (dict(cpu_percent=-1), "cpu_percent"),
    (dict(mem_percent=math.inf), "mem_percent"), (dict(tasks_done=-1), "tasks_done"),
    (dict(tasks_per_s=math.nan), "tasks_per_s"), (dict(time=-5), "time"),
])
def test_metrics_sample_refuses_nan_and_negative(kw, match):
    base = dict(job_id="j1", time=1.0, cpu_percent=50, mem_percent=10)
    base.update(kw)
    with pytest.raises(InvalidInput, match=f"metrics of job j1: {match}"):
        MetricsSample(**base)


def test_ids_and_classes():
    assert validate_job_id("1234.0_a-b") == "1234.0_a-b"
    for bad in ("..", ".", "a/b", "a b", "x" * 200, 12):
        with pytest.raises(InvalidInput):
            validate_job_id(bad)
    assert validate_job_class("montage/mProject") == "montage/mProject"
    with pytest.raises(InvalidInput):
        validate_job_class("/abs")


def test_progress_round_trip_and_garbage(tmp_path, monkeypatch):
    f = tmp_path / "p.json"
    write_progress(3, 10, f, now=5.0)
    p = read_progress(f)
    assert (p.done, p.total, p.time) == (3, 10, 5.0)
    f.write_text("{not json")
    assert read_progress(f) is None
    assert read_progress(tmp_path / "missing") is None
    with pytest.raises(ValueError, match="done"):
        write_progress(-1, 10, f)
    monkeypatch.delenv("COSCHED_PROGRESS_FILE", raising=False)
    assert write_progress(1, 2, None) is None          # no path, no env var: nothing written
    monkeypatch.setenv("COSCHED_PROGRESS_FILE", str(tmp_path / "env.json"))
    assert write_progress(4, 8) == tmp_path / "env.json"
    assert read_progress(tmp_path / "env.json").done == 4


def test_cli_version():
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output


def test_a_hostile_progress_file_reads_as_no_progress(tmp_path):
    # a job writes its own progress file; the agent (root) and the controller read it
    f = tmp_path / "p.json"
    for text in ("[" * 60000 + "]" * 60000,                       # once a RecursionError
                 '{"done": 1, "total": 2, "time": 1' + "0" * 400 + "}",  # once an OverflowError
                 '{"done": true, "total": 2, "time": 1}', '[1, 2, 3]', '{"done": 1, "time": "x"}',
                 '{"done": 1, "total": null, "time": 1, "pad": "' + "x" * 70000 + '"}'):
        f.write_text(text)
        assert read_progress(f) is None, text[:40]
    f.write_text('{"done": 3, "total": null, "time": 5}')
    assert read_progress(f).done == 3
