"""``squeue --json`` answers shared by the tests of its readers (tests/test_squeue_per_job.py,
tests/test_squeue_streamed.py, tests/test_slurm_rest.py), and the stream's answer to one."""

from __future__ import annotations

from conftest import FIXTURES
from slurm_plugin.jobstream import JobsStream, Surprise
from slurm_plugin.parse import ParseError

RECORDED = sorted(p for p in (FIXTURES / "slurm").glob("*/*.json")
                  if p.name.startswith(("squeue", "scontrol_show_job")))

# Answers of odd shapes: each reader gives the same jobs or the same error for each.
ODD_ANSWERS = [
    '{"jobs": []}',
    '  {"meta": {"x": [1, {"y": "]}"}]}, "jobs" : [ ] , "errors": [] }\n',
    '{"errors": [{"error": "Unspecified error"}], "jobs": [{"job_id": "x"}]}',   # Slurm's errors first
    '{"jobs": [{"job_id": "x"}], "errors": [{"description": "down"}]}',
    '{"jobs": [{"job_id": 1, "job_state": "RUNNING"}, {"nope": 1}]}',             # a bad record
    '{"jobs": {"job_id": 1}}',                                                     # not a list
    '{"jobs": [{"job_id": 1, "job_state": "RUNNING"}], "jobs": 5}',                # json.loads: the last
    '{"jobs": 5, "jobs": [{"job_id": 1, "job_state": "RUNNING"}]}',
    '{"meta": {}}',
    '[{"job_id": 1}]',
    '"jobs"',
    '{"jobs": [{"job_id": 1, "job_state": "RUNNING"}]} trailing',
    '{"jobs": [{"job_id": 1, "job_state": "RUNNING"},]}',
    '{"jobs": [{"job_id": 1, "job_state": "RUNNING"}]',
    '{"jobs": [NaN]}',
    '{"jobs": [' + "[" * 100 + "]" * 100 + "]}",                                   # too deep
    "",
    "{\"jobs\": [{\"job_id\": 1, \"job_state\": \"RUNNING\", \"name\": \"\\ud800\"}]}",
]


def streamed(raw: bytes, piece: int, what: str = "squeue --json"):
    """The stream's answer to ``raw`` fed ``piece`` bytes at a time: the jobs, the error's
    type and message, or ("surprise", why)."""
    s = JobsStream(what)
    for k in range(0, len(raw), piece):
        s.feed(raw[k:k + piece])
    try:
        return s.finish()
    except Surprise as exc:
        return "surprise", str(exc)
    except ParseError as exc:
        return type(exc), str(exc)


def surprised(text: str) -> bool:
    """Whether the stream leaves ``text`` to be read again whole."""
    got = streamed(text.encode(), 1 << 16)
    return isinstance(got, tuple) and got[0] == "surprise"
