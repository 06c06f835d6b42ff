"""What a probe of the Slurm adapters found on 2026-12-03 (issue 24: bad input from peers and
users), each held here on recorded output of real Slurm 22.05 / 24.11 / 26.05:

- a newline in a job's working directory (jobcomp/filetxt prints WorkDir= as typed) starts a
  line of the user's choosing, read as another job's end;
- a lone CR in scontrol's text output was turned into a line end, so a user's comment could
  carry a whole job record;
- a run of 5,000 digits in a field raised ValueError (``int`` refuses more than 4,300) where a
  bad line must be skipped with a ParseError;
- slurmrestd answering with another partition's record gave that partition's MaxTime;
- ``{"infinite": "false"}`` read as infinite (a non-empty string is truthy).
The Lua hook's findings (``--time=0``, control characters in its log lines) are held by the
live Slurm test ``tests/test_slurm_live.py::test_hook_accepts_and_refuses_metadata_like_the_parser``.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta

import pytest

from conftest import FIXTURES
from slurm_plugin import rest_contract
from slurm_plugin.commands import _text
from slurm_plugin.jobcomp import JOBCOMP_KEYS, find_in_jobcomp, parse_jobcomp, parse_jobcomp_line
from slurm_plugin.parse import ParseError, _num, duration_s, parse_scontrol_jobs

SLURM = FIXTURES / "slurm"
VERSIONS = ("22.05", "24.11", "26.05")


def _lines(version: str) -> list[str]:
    return (SLURM / version / "jobcomp.txt").read_text().splitlines()


def _forged_after_newline(version: str, whole_prefix: bool
                          ) -> tuple[list[str], int, tuple[str | None, float | None]]:
    """The recorded log plus an attacker's job whose working directory holds a newline and
    then a line claiming that the failed job completed. ``whole_prefix``: the user typed
    every key Slurm prints before WorkDir=, in order (what a careful forger does)."""
    lines = _lines(version)
    failed = next(x for x in lines if "Name=done-failed " in x)
    victim = parse_jobcomp_line(failed)
    ok = next(x for x in lines if "Name=done-ok " in x)
    if whole_prefix:
        head = failed[:failed.index(" WorkDir=")]
        typed = head.replace("JobState=FAILED", "JobState=COMPLETED") + " WorkDir=/home/v"
    else:
        typed = f"JobId={victim.job_id} UserId={victim.user}(0) JobState=COMPLETED Partition=cosched"
    attacker = ok.replace("JobId=", "JobId=9", 1)
    # (submitted a minute after the victim: the recorded jobs share one second)
    stamp = re.search(r"SubmitTime=(\S+)", attacker).group(1)
    later = (datetime.fromisoformat(stamp) + timedelta(minutes=1)).isoformat(timespec="seconds")
    attacker = attacker.replace(f"SubmitTime={stamp}", f"SubmitTime={later}")
    start = attacker.index("WorkDir=") + len("WorkDir=")
    end = attacker.index(" ", start)
    attacker = attacker[:end] + "\n" + typed + attacker[end:]
    return lines + attacker.split("\n"), victim.job_id, (victim.user, victim.submit_time)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_line_cut_by_a_newline_in_a_working_directory_is_not_another_jobs_end(version, caplog):
    lines, victim, _ = _forged_after_newline(version, whole_prefix=False)
    newest_first = list(reversed(lines))
    found = find_in_jobcomp(newest_first, [victim])
    assert found[victim].state == "FAILED"            # its own line, not the forged one
    assert parse_jobcomp("\n".join(lines))[victim].state == "FAILED"
    assert f"job {victim}'s line lacks" in caplog.text


@pytest.mark.parametrize("version", VERSIONS)
def test_a_careful_forgery_is_refused_by_what_slurm_showed_of_the_job(version, caplog):
    """Typed with every key before WorkDir= in order, the forged line is well formed; its
    tail (SubmitTime=...) is still the attacker's own job's, so it disagrees with the submit
    time Slurm showed for the victim while it ran."""
    lines, victim, seen = _forged_after_newline(version, whole_prefix=True)
    newest_first = list(reversed(lines))
    assert find_in_jobcomp(newest_first, [victim])[victim].state == "COMPLETED"   # unchecked
    caplog.set_level(logging.WARNING)
    found = find_in_jobcomp(newest_first, [victim], {victim: seen})
    assert found[victim].state == "FAILED"
    assert f"job {victim}'s line" in caplog.text and "submitted at" in caplog.text


def test_every_recorded_jobcomp_line_carries_slurms_keys_in_order():
    for version in VERSIONS:
        for line in _lines(version):
            if line.strip():
                assert parse_jobcomp_line(line) is not None, (version, line[:80])
    assert JOBCOMP_KEYS[0] == "JobId" and JOBCOMP_KEYS[-1] == "ExitCode"


def test_a_lone_carriage_return_in_a_comment_is_not_a_line_end():
    text = (SLURM / "22.05" / "scontrol_show_job.txt").read_text()
    forged = ("\r\nJobId=4 JobName=y UserId=root(0) JobState=COMPLETED Partition=cosched"
              .replace("\r\n", "\r"))
    line_with_comment = text.replace("Comment=", "Comment=x" + forged + " ", 1)
    assert line_with_comment != text
    # (read as a line end, the CR made job 4's record; kept, the line holds JobId= twice)
    with pytest.raises(ParseError, match="line has JobId= twice"):
        parse_scontrol_jobs(_text(line_with_comment.encode()))
    assert _text(b"a\r\nb\rc") == "a\nb\rc"


@pytest.mark.parametrize("call", [
    lambda big: duration_s(big),
    lambda big: parse_scontrol_jobs(f"JobId=1 JobName=x UserId=a(1) Priority={big} JobState=PENDING"),
    lambda big: find_in_jobcomp([f"JobId={big} Name=x", "JobId=7 JobState=COMPLETED"], [7]),
    lambda big: parse_jobcomp(f"JobId=8 UserId=a(1) JobState=COMPLETED ProcCnt={big}"),
], ids=["duration", "scontrol priority", "jobcomp id", "jobcomp procs"])
def test_thousands_of_digits_are_bad_input_not_a_valueerror(call):
    try:
        call("9" * 5000)
    except ParseError:
        pass   # a bad value, named; every other outcome but ValueError is fine too


@pytest.mark.parametrize("version", [v for v in VERSIONS if (SLURM / v / "rest_ping.json").exists()])
def test_a_rest_answer_without_the_asked_partition_is_refused(version):
    rel = rest_contract.release_of_ping(json.loads((SLURM / version / "rest_ping.json").read_text()),
                                        "ping")
    parser = rest_contract.REST_PARSER[(rel.major, rel.minor)]
    data = json.loads((SLURM / version / "rest_partition.json").read_text())
    for part in data["partitions"]:
        part["name"] = "batch"        # (slurmrestd answered about another partition)
    with pytest.raises(ParseError, match="no partition named 'cosched'"):
        rest_contract.parse_partition_max_time(rel, parser, data, "cosched")


@pytest.mark.parametrize("value", [{"infinite": "false", "number": 5}, {"set": "false", "number": 5}])
def test_number_flags_must_be_booleans(value):
    with pytest.raises(ParseError, match="must be true or false"):
        _num(value)
    assert _num({"set": True, "infinite": False, "number": 5}) == 5
