"""What a probe of the command line's inputs found on 2026-12-03 (issue 24: never a traceback
for bad input), each held here: a one-line error naming the input, a non-zero exit.

- ``--db '~nosuchuser/x.db'`` and ``COSCHED_DB='~nosuchuser/x'`` ended in RuntimeError;
- ``cosched slurm priority`` with a bad ``$COSCHED_SLURM_MAX_JSON_MB`` ended in InvalidInput;
- ``cosched testbed report`` on a run.json of another shape ended in AttributeError/TypeError;
- ``cosched run --backend slurm --slurm-conf`` pointed at a FIFO, /dev/zero, an empty or a
  binary file went on (exit 0) with every Slurm command failing at every pass.
"""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.data import swf_dir
from coscheduler.multi.report import MODELS_DIR


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


def _one_line_error(r, *words: str) -> None:
    assert r.exit_code != 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines and lines[-1].startswith("Error: "), r.stderr
    assert "Traceback" not in r.output
    for w in words:
        assert w in lines[-1], (w, lines[-1])


def test_a_db_path_whose_home_cannot_be_found_is_named():
    _one_line_error(run("decisions", "list", "--db", "~nosuchuser-xyz/x.db"), "--db", "~nosuchuser-xyz")
    _one_line_error(run("decisions", "list", env={"COSCHED_DB": "~nosuchuser-xyz/x"}),
                    "$COSCHED_DB")
    _one_line_error(run("simulate", "paper", "--repeat", "1", "--cores", "64", "--policies", "asax",
                        "--scale", "0.05", "--db", "~nosuchuser-xyz/x.db"), "~nosuchuser-xyz")


@pytest.mark.parametrize("value", ["abc", "0", "inf"])
def test_a_bad_json_size_limit_for_slurm_priority_is_named(tmp_path, value):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    _one_line_error(run("slurm", "priority", "--once", "--slurm-conf", str(conf),
                        env={"COSCHED_SLURM_MAX_JSON_MB": value}), "COSCHED_SLURM_MAX_JSON_MB")


@pytest.mark.parametrize("body", ['{"runs": "x", "setup": {}}', '{"runs": [{}], "setup": {}}',
                                  '{"runs": [], "setup": 5}', '{"runs": [7], "setup": {}}'])
def test_a_testbed_report_of_a_run_json_of_another_shape_is_one_line(tmp_path, body):
    (tmp_path / "run.json").write_text(body)
    _one_line_error(run("testbed", "report", "--results", str(tmp_path)), "run.json")


def _fifo(tmp_path):
    p = tmp_path / "fifo.conf"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("make,why", [
    (_fifo, "not a regular file"),
    (lambda t: (t / "empty.conf", (t / "empty.conf").write_text(""))[0], "no key=value line"),
    (lambda t: (t / "bin.conf", (t / "bin.conf").write_bytes(b"\x00\xff\xfe=x"))[0], "not UTF-8"),
], ids=["fifo", "empty", "binary"])
def test_run_refuses_a_slurm_conf_that_is_not_one(tmp_path, make, why):
    conf = make(tmp_path)
    r = run("run", "--backend", "slurm", "--slurm-conf", str(conf), "--max-passes", "1",
            "--db", str(tmp_path / "s.db"))
    _one_line_error(r, str(conf), why)


@pytest.mark.parametrize("source,target,why", [
    ("mrsch-lublin_256-S2.model", "mrsch-lublin_256-S1.model", "trained on job set 'S2'"),
    ("scalar-lublin_256-S1.model", "mrsch-lublin_256-S1.model", "trained with the 'fixed' goal"),
], ids=["another set", "another goal"])
def test_an_mrsch_model_for_another_set_or_goal_is_refused(tmp_path, source, target, why):
    """Probed: a model copied over another's name was played without a word (the S2 model
    as S1's, the fixed-goal scalar model as MRSch's); only the machine was checked."""
    shutil.copy(MODELS_DIR / source, tmp_path / target)
    r = run("simulate", "multi", "--from", str(swf_dir() / "lublin_256.swf"), "--sets", "S1",
            "--methods", "mrsch", "--models", str(tmp_path))
    _one_line_error(r, why)


def test_a_queue_file_job_without_a_required_field_names_the_field():
    """Probed: the error was Python's ``Job.__init__() missing 1 required positional
    argument: 'job_class'``."""
    from coscheduler.model import InvalidInput
    from mesos_framework.queue import job_from_dict

    with pytest.raises(InvalidInput, match=r"^q.json job 0: missing field\(s\) \['job_class'\]$"):
        job_from_dict({"job_id": "a", "cores": 1, "walltime_s": 5, "command": ["true"]}, "q.json job 0")


_LINE = "1 {submit} 0 {run} 1 -1 -1 1 20 -1 1 1 1 1 1 1 -1 -1\n"


@pytest.mark.parametrize("header,line,why", [
    ("; MaxProcs: 8\n", _LINE.format(submit="1e17", run="5"), "'submit time' is 1e17 s"),
    ("; MaxProcs: 8\n", _LINE.format(submit="1", run="1e308"), "'run time' is 1e308 s"),
    ("; MaxProcs: 4000000000\n", _LINE.format(submit="1", run="5"), "more than the 16777216"),
    ("; MaxProcs: 99999999999999999999999\n", _LINE.format(submit="1", run="5"), "more than the"),
], ids=["submit 1e17", "run 1e308", "MaxProcs 4e9", "MaxProcs 1e23"])
def test_times_and_machines_past_any_real_one_are_refused_with_their_line(tmp_path, header, line, why):
    """Probed: a submit time of 1e17 made the makespan 0 (ZeroDivisionError), a run time
    of 1e308 printed Infinity and NaN as JSON, a MaxProcs of 4e9 ran out of memory."""
    trace = tmp_path / "t.swf"
    trace.write_text(header + line)
    _one_line_error(run("simulate", "swf", str(trace), "--json", "--out", str(tmp_path / "o")), why)


@pytest.mark.parametrize("change,why", [
    (lambda d: d["jobs"][0].update(subtime=1e17), "subtime"),
    (lambda d: d["profiles"]["p"].update(delay=1e308), "delay"),
    (lambda d: d.update(nb_res=4_000_000_000), "nb_res"),
    (lambda d: d["profiles"].update(p={"type": "parallel_homogeneous", "cpu": 1e300, "com": 0}), "cpu"),
])
def test_batsim_times_and_machines_past_any_real_one_are_refused(tmp_path, change, why):
    import json

    doc = {"nb_res": 4, "jobs": [{"id": 1, "subtime": 0, "res": 1, "profile": "p"}],
           "profiles": {"p": {"type": "delay", "delay": 5}}}
    change(doc)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    _one_line_error(run("simulate", "swf", str(path), "--json"), why)


def test_a_trace_without_usable_jobs_names_the_file_and_why(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 8\n" + _LINE.format(submit="1", run="-1"))
    _one_line_error(run("simulate", "swf", str(trace)), str(trace), "no usable jobs", "run time <= 0")
