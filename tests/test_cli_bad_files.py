"""Files a user names on the command line (issue 24: bad input gets a clear error naming the
input, never a traceback): JSON nested 100,000 deep (before, a RecursionError traceback from
`calibrate --from` and `testbed report --results`), binary bytes, an empty file. Each command
answers with one error line that names the file, and exits non-zero."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.learned.modelfile import MAGIC, ModelError, load_model

DEEP = b"[" * 100_000 + b"]" * 100_000


def _bad_files(tmp: Path) -> dict[str, Path]:
    files = {"deep": tmp / "deep.json", "binary": tmp / "binary.json", "empty": tmp / "empty.json"}
    files["deep"].write_bytes(DEEP)
    files["binary"].write_bytes(bytes(range(256)) * 8)
    files["empty"].write_bytes(b"")
    return files


# (argv with FILE where the bad file goes)
COMMANDS = [
    ["calibrate", "--from", "FILE"],
    ["testbed", "report", "--results", "FILE", "--out", "OUT"],
    ["simulate", "swf", "FILE"],                      # a .json file is read as a Batsim workload
    ["workload", "batsim", "--from", "FILE", "--out", "OUT/w.json"],
]


@pytest.mark.parametrize("kind", ["deep", "binary", "empty"])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_bad_file_is_one_error_line_naming_it(tmp_path, argv, kind):
    bad = _bad_files(tmp_path)[kind]
    args = [str(bad) if a == "FILE" else a.replace("OUT", str(tmp_path / "out")) for a in argv]
    r = CliRunner().invoke(main, args)
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("Error:") and bad.name in last, r.output


def test_a_bad_gate_trace_is_one_error_not_one_per_model(tmp_path):
    # Before: the parse error once per shipped model (14), then "14 of 14 could not be gated".
    bad = _bad_files(tmp_path)["binary"]
    r = CliRunner().invoke(main, ["models", "gate", "--trace", str(bad), "--no-write"])
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [f"Error: {bad}:1: expected 18 fields, found 1 "
                                             "(use --skip-bad-lines to skip such lines)"]


def test_a_model_file_whose_header_is_nested_deep_is_refused_by_name(tmp_path):
    # (what `train --init` and `simulate learned --models` read; not through the CLI here:
    # `train` loads JAX, whose threads would keep this test process from forking later)
    model = tmp_path / "deep.model"
    model.write_bytes(MAGIC + DEEP + b"\n" + b"PK")
    with pytest.raises(ModelError) as info:
        load_model(model)
    assert str(info.value).startswith(f"{model}: the model header is not usable (JSON: nested "
                                      "more than 64 levels deep)")


def test_the_other_json_readers_refuse_deep_nesting_with_a_message(tmp_path):
    from coscheduler.learned.gate import read_verdict, report_path
    from coscheduler.workloads.summary import summarize_instance
    from slurm_plugin.cluster import STATE_FILE, ClusterError, load_state

    deep = tmp_path / "instance.json"
    deep.write_bytes(DEEP)
    with pytest.raises(ValueError, match="not a readable WfFormat instance .*nested more than"):
        summarize_instance(deep)
    (tmp_path / STATE_FILE).write_bytes(DEEP)
    with pytest.raises(ClusterError, match="nested more than"):
        load_state(tmp_path)
    model = tmp_path / "x.model"
    model.write_bytes(b"")
    report_path(model).write_bytes(DEEP)
    assert read_verdict(model) == ("unevaluated", None)
