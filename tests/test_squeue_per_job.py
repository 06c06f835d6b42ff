"""A large ``squeue --json`` answer is read a job at a time (slurm_plugin/parse.py,
``_RecordsReader``) and its bounds are checked a piece at a time (boundedjson.checked_text):
the same jobs and the same errors as the whole-tree reader, without the whole tree (nor a
second copy of the text) in memory."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduler import boundedjson
from coscheduler.bench.jsonread import squeue_like
from slurm_plugin.bench_squeue import whole_tree
from slurm_plugin.parse import ParseError, ReportedErrors, parse_jobs_json
from slurm_answers import ODD_ANSWERS, RECORDED
from test_bounded_reads import _depth



def _old(text: str):
    """The whole-tree reader's answer: the jobs, or the error's type and message."""
    from slurm_plugin.parse import _load, job_from_json
    try:
        data = _load(text, "squeue --json")
        jobs = data.get("jobs")
        if not isinstance(jobs, list):
            raise ParseError(f"squeue --json answered without the field 'jobs' as a list "
                             f"(fields: {sorted(data)})")
        return [job_from_json(j, "squeue --json") for j in jobs]
    except ParseError as exc:
        return type(exc), str(exc)


def _new(text: str):
    try:
        return parse_jobs_json(text, "squeue --json")
    except ParseError as exc:
        return type(exc), str(exc)


def test_recorded_answers_of_three_releases_read_the_same():
    assert len(RECORDED) >= 5, RECORDED
    for path in RECORDED:
        text = path.read_text()
        got = _new(text)
        assert isinstance(got, list) and got, path
        assert got == _old(text), path


@pytest.mark.parametrize("text", ODD_ANSWERS)
def test_odd_answers_give_the_same_jobs_or_the_same_error(text):
    assert _new(text) == _old(text)


def test_slurms_reported_errors_come_before_a_bad_record():
    got = _new('{"jobs": [{"nope": 1}], "errors": [{"error": "slurmctld down"}]}')
    assert got[0] is ReportedErrors and "slurmctld down" in got[1]


def test_a_large_answer_is_read_without_its_whole_tree(monkeypatch):
    text = squeue_like(2000).decode()
    monkeypatch.setattr(boundedjson, "_CHUNK", 1 << 16)   # (the pieces' share out of the way)
    tracemalloc.start()
    try:
        jobs = parse_jobs_json(text)
        per_job = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        assert whole_tree(text) == jobs and len(jobs) == 2000
        whole = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # (the figures: `cosched bench squeue`; here only that the tree is not built)
    assert per_job < whole / 3, (per_job, whole)
    assert per_job < len(text) / 4, (per_job, len(text))


# -- the bounds on a text, checked a piece at a time -------------------------------------------

_TEXT = st.text(alphabet='[]{}"\\\\/nu axé€', max_size=8)
_DOCS = st.recursive(st.none() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(doc=_DOCS, chunk=st.sampled_from([1, 2, 3, 7, 1 << 22]), ascii_only=st.booleans())
def test_a_texts_depth_and_size_are_those_of_its_bytes(doc, chunk, ascii_only):
    text = json.dumps(doc, ensure_ascii=ascii_only)
    raw = text.encode()
    saved = boundedjson._CHUNK
    boundedjson._CHUNK = chunk
    try:
        d = _depth(doc)
        assert boundedjson.checked_text(text, max_depth=d, max_bytes=len(raw)) == text
        if d > 0:
            with pytest.raises(boundedjson.JSONUnusable, match=f"nested more than {d - 1}"):
                boundedjson.checked_text(text, max_depth=d - 1, max_bytes=len(raw))
        if len(raw) > len(text):       # more bytes than characters: counted as bytes
            with pytest.raises(boundedjson.JSONUnusable, match="bytes allowed"):
                boundedjson.checked_text(text, max_depth=d, max_bytes=len(raw) - 1)
    finally:
        boundedjson._CHUNK = saved


def test_a_lone_surrogate_is_not_utf8_text():
    with pytest.raises(boundedjson.JSONUnusable, match="not UTF-8"):
        boundedjson.checked_text('{"a": "\ud800"}', what="x")
    with pytest.raises(boundedjson.JSONUnusable, match="not UTF-8"):
        boundedjson.loads('{"a": "\ud800"}')
