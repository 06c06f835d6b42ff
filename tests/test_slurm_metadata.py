"""The opt-in grammar (slurm_plugin/metadata.py) and the backend's AdminComment marks."""

from __future__ import annotations

import pytest

from coscheduler.model import StageType
from slurm_cases import METADATA_CASES
from slurm_plugin.metadata import (AdminMark, JobMetadata, MetadataError, default_class,
                                   format_admin_comment, format_comment, parse_admin_comment,
                                   parse_comment)


@pytest.mark.parametrize("comment, minutes, problem", METADATA_CASES)
def test_parser_agrees_with_the_shared_table(comment, minutes, problem):
    if problem is None:
        parse_comment(comment, minutes * 60)
    else:
        with pytest.raises(MetadataError) as err:
            parse_comment(comment, minutes * 60)
        assert problem.replace("'", "") in str(err.value).replace("'", "")


def test_fields_and_round_trip():
    m = parse_comment("cosched:class=blast/blastall,type=parallel,tasks=121,workflow=b1,"
                      "stage=blastall,walltime=40", 60)
    assert m == JobMetadata("blast/blastall", StageType.PARALLEL, 121, "b1", "blastall", 40.0)
    assert parse_comment(format_comment(m), 60) == m
    assert parse_comment(None) == JobMetadata() and parse_comment("hello") == JobMetadata()
    assert format_comment(JobMetadata()) == ""
    with pytest.raises(MetadataError):
        format_comment(JobMetadata(job_class="bad class"))


def test_default_class_is_always_a_valid_class():
    from coscheduler.model import validate_job_class

    for user, name in [("alice", "my job.sh"), (None, None), ("bob", "../../etc"), ("c", "-x"),
                       ("d", "x" * 300)]:
        validate_job_class(default_class(user, name))
    assert default_class("alice", "run.sh") == "alice/run.sh"
    # a run number or a date in the name does not make a class per job
    assert default_class("alice", "run_12345") == default_class("alice", "run_12346") == "alice/run_N"
    assert default_class("bob7", "sim-2026-11-29.sh") == "bob7/sim-N-N-N.sh"
    assert default_class("alice", "blast") != default_class("alice", "montage")


def test_admin_marks():
    assert parse_admin_comment(format_admin_comment(AdminMark(0.6))) == AdminMark(0.6, None)
    assert parse_admin_comment(format_admin_comment(AdminMark(0.25, "123"))) == AdminMark(0.25, "123")
    for text in (None, "", "note by an admin", "cosched:v=2;quota=0.5", "cosched:v=1;quota=nan",
                 "cosched:v=1;quota=0", "cosched:v=1;quota=1.5", "cosched:v=1;quota=0.5;host=../x"):
        assert parse_admin_comment(text) is None, text
