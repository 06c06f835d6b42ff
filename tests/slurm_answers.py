"""Slurm's list answers (``squeue --json``, ``scontrol show node --json``) shared by the tests of
their readers (tests/test_squeue_per_job.py, tests/test_squeue_streamed.py,
tests/test_nodes_streamed.py, tests/test_slurm_rest.py), and the stream's answer to one."""

from __future__ import annotations

import json

from conftest import FIXTURES
from slurm_plugin.answerstream import JobsStream, Surprise
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


def streamed(raw: bytes, piece: int, what: str = "squeue --json", stream=JobsStream):
    """The stream's answer to ``raw`` fed ``piece`` bytes at a time: the jobs (or nodes), the
    error's type and message, or ("surprise", why)."""
    s = stream(what)
    for k in range(0, len(raw), piece):
        s.feed(raw[k:k + piece])
    try:
        return s.finish()
    except Surprise as exc:
        return "surprise", str(exc)
    except ParseError as exc:
        return type(exc), str(exc)


def surprised(text: str, stream=JobsStream) -> bool:
    """Whether the stream leaves ``text`` to be read again whole."""
    got = streamed(text.encode(), 1 << 16, stream=stream)
    return isinstance(got, tuple) and got[0] == "surprise"


# -- nodes ---------------------------------------------------------------------------------------

_NODE_FILES = sorted(p for p in (FIXTURES / "slurm").glob("*/*.json")
                     if p.name.startswith(("scontrol_show_node", "sinfo", "rest_nodes")))
# (23.02+ ``sinfo --json`` aggregates nodes per partition: no node list, an error to read)
NODES_RECORDED = [p for p in _NODE_FILES if isinstance(json.loads(p.read_text()).get("nodes"), list)]
SINFO_AGGREGATED = [p for p in _NODE_FILES if p not in NODES_RECORDED]

_NODE = '{"name": "n%d", "state": ["IDLE"], "cpus": 4, "partitions": ["debug"]}'
ODD_NODE_ANSWERS = [
    '{"nodes": []}',
    '{"nodes": [' + _NODE % 1 + ', ' + _NODE % 2 + '], "errors": [], "warnings": []}',
    '{"errors": [{"error": "Unable to contact slurm controller"}], "nodes": []}',   # Slurm's errors
    '{"nodes": [{"name": "n1"}], "errors": [{"description": "down"}]}',             # ... first
    '{"nodes": [' + _NODE % 1 + ', {"name": "n2", "state": "IDLE"}]}',              # a bad record
    '{"nodes": [' + _NODE % 1 + ', 7]}',
    '{"sinfo": [{"partition": {"name": "debug"}, "nodes": {"total": 3}}], "errors": []}',  # 23.02+ sinfo
    '{"nodes": {"name": "n1"}}',
    '{"nodes": [' + _NODE % 1 + '], "nodes": 5}',
    '{"nodes": 5, "nodes": [' + _NODE % 1 + ']}',
    '[' + _NODE % 1 + ']',
    '{"nodes": [' + _NODE % 1 + ']} trailing',
    '{"nodes": [' + _NODE % 1 + ']',
    '{"nodes": [' + "[" * 100 + "]" * 100 + "]}",
    "",
]


def nodes_like(n: int) -> bytes:
    """``scontrol show node --json`` of 24.11 listing ``n`` nodes, each the recorded first one
    renamed (about 1.7 KB a node)."""
    top = json.loads((FIXTURES / "slurm" / "24.11" / "scontrol_show_node.json").read_text())
    first = top["nodes"][0]
    records = ",\n".join(json.dumps(dict(first, name=f"node{i:06d}")) for i in range(n))
    rest = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in top.items() if k != "nodes")
    return ('{"nodes": [\n' + records + "\n], " + rest + "}\n").encode()
