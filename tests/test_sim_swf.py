"""The SWF reader: header rules, per-job rules, gzip, malformed lines, the real traces."""

from __future__ import annotations

import gzip
import shutil

import pytest

from conftest import FIXTURES
from coscheduler.sim.swf import SwfFormatError, TraceJob, read_swf

SMALL = FIXTURES / "swf" / "small.swf"
BAD = FIXTURES / "swf" / "bad.swf"

# small.swf, sorted by job number, job 2 dropped (run time 0):
SMALL_JOBS = [
    # index, id, submit, run, procs = max(alloc, req), estimate, user
    TraceJob(0, 1, 0.0, 100.0, 8, 120.0, 5),
    TraceJob(1, 3, 20.0, 30.0, 4, 60.0, 7),   # requested 4 > allocated 2
    TraceJob(2, 4, 25.0, 40.0, 3, 40.0, 7),   # requested time -1: estimate = run time
    TraceJob(3, 5, 30.0, 15.0, 1, 10.0, 5),   # estimate below run time: kept as given
]


def swf_line(job=1, submit=0, run=10, alloc=1, req=-1, req_time=20, user=1, extra=None):
    fields = [job, submit, -1, run, alloc, -1, -1, req, req_time, -1, 1, user, -1, -1, -1, -1, -1, -1]
    if extra is not None:
        fields = extra
    return " ".join(str(f) for f in fields)


def write(tmp_path, lines, name="t.swf"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_small_fixture():
    trace = read_swf(SMALL)
    assert (trace.max_nodes, trace.max_procs) == (4, 8)
    assert trace.jobs == SMALL_JOBS
    assert trace.dropped == {"run time <= 0": 1}
    assert trace.skipped_lines == 0
    assert trace.header["MaxNodes"] == "4 (batch partition; 8 total)"


def test_gzip_reads_the_same(tmp_path):
    gz = tmp_path / "small.swf.gz"
    with SMALL.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert read_swf(gz).jobs == SMALL_JOBS


def test_max_procs_defaults_to_max_nodes(tmp_path):
    trace = read_swf(write(tmp_path, ["; MaxNodes: 16", swf_line()]))
    assert (trace.max_nodes, trace.max_procs) == (16, 16)


def test_malformed_line_names_file_and_line():
    with pytest.raises(SwfFormatError) as err:
        read_swf(BAD)
    assert str(err.value).startswith(f"{BAD}:3: expected 18 fields, found 17")
    assert err.value.line_no == 3
    assert "--skip-bad-lines" in str(err.value)


def test_skip_bad_lines_counts_and_keeps_examples():
    trace = read_swf(BAD, skip_bad_lines=True)
    assert trace.skipped_lines == 2
    assert [j.job_id for j in trace.jobs] == [1, 4]
    assert trace.bad_line_examples == [
        f"{BAD}:3: expected 18 fields, found 17",
        f"{BAD}:4: field 'run time' is not a number: 'x5'",
    ]
    assert trace.max_procs == 4  # defaulted from MaxNodes


@pytest.mark.parametrize(
    "fields, reason",
    [
        ([1, 0, -1, "nan"] + [1] * 14, "field 'run time' is not finite"),
        ([1, 0, -1, 10, "inf"] + [1] * 13, "field 'allocated processors' is not finite"),
        ([1.5, 0, -1, 10, 1] + [1] * 13, "job number must be a non-negative integer"),
        ([1, -5, -1, 10, 1] + [1] * 13, "submit time must be >= 0"),
        ([1, 0, -1, 10, 2.5] + [1] * 13, "'allocated processors' must be an integer"),
    ],
)
def test_bad_values_are_malformed(tmp_path, fields, reason):
    path = write(tmp_path, ["; MaxNodes: 4", swf_line(extra=fields)])
    with pytest.raises(SwfFormatError, match=f"{path}:2: .*{reason}"):
        read_swf(path)


def test_jobs_that_cannot_run_are_dropped_and_counted(tmp_path):
    path = write(tmp_path, [
        "; MaxNodes: 4",
        swf_line(job=1, run=-1),            # no run time
        swf_line(job=2, alloc=-1, req=-1),  # no processor count
        swf_line(job=3, alloc=5),           # wider than the machine
        swf_line(job=4, req_time=0),        # estimate 0: falls back to run time
    ])
    trace = read_swf(path)
    assert trace.dropped == {
        "run time <= 0": 1, "no processor count": 1, "more processors than MaxProcs": 1,
    }
    assert [(j.job_id, j.estimate) for j in trace.jobs] == [(4, 10.0)]


def test_header_without_machine_size_is_refused(tmp_path):
    with pytest.raises(SwfFormatError, match="neither MaxNodes nor MaxProcs"):
        read_swf(write(tmp_path, ["; Version: 2", swf_line()]))


def test_header_size_must_start_with_an_integer(tmp_path):
    path = write(tmp_path, ["; MaxNodes: about 300", swf_line()])
    with pytest.raises(SwfFormatError, match=f"{path}:1: header MaxNodes must start with"):
        read_swf(path)


def test_procs_must_split_evenly_over_nodes(tmp_path):
    with pytest.raises(SwfFormatError, match="not a multiple of MaxNodes"):
        read_swf(write(tmp_path, ["; MaxNodes: 4", "; MaxProcs: 10", swf_line()]))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(SwfFormatError, match="cannot read trace"):
        read_swf(tmp_path / "nope.swf")


def test_broken_gzip_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.swf.gz"
    path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(SwfFormatError, match="not a readable gzip file"):
        read_swf(path)


REAL = [
    # file, MaxNodes, MaxProcs, jobs after dropping run time <= 0
    ("lublin_256.swf", 256, 256, 10000),
    ("CTC-SP2-1996-3.1-cln.swf.gz", 338, 338, 77205),  # '; MaxNodes: 338 (batch partition; 512 total)'
    ("HPC2N-2002-2.2-cln.swf.gz", 240, 240, 202871),
]


@pytest.mark.parametrize("name, nodes, procs, jobs", REAL)
def test_real_traces_parse(bundled_data, name, nodes, procs, jobs):
    path = bundled_data / "swf" / name
    trace = read_swf(path)
    assert (trace.max_nodes, trace.max_procs) == (nodes, procs)
    assert len(trace.jobs) == jobs
    assert trace.skipped_lines == 0
    ids = [j.job_id for j in trace.jobs]
    assert ids == sorted(ids)
    assert all(j.run > 0 and j.estimate > 0 and 1 <= j.procs <= procs for j in trace.jobs)


@pytest.mark.parametrize("name, nodes, procs, jobs", REAL)
def test_the_vectorised_read_equals_the_line_by_line_one(bundled_data, name, nodes, procs, jobs):
    """The one-pass numpy read (issue 24, scale) gives the same trace as the line reader,
    and is the path a well-formed trace takes."""
    from coscheduler.sim.swf import _read_fast, _read_text
    path = bundled_data / "swf" / name
    assert _read_fast(str(path), _read_text(path), ()) is not None
    fast, slow = read_swf(path), read_swf(path, vectorised=False)
    assert fast.jobs == slow.jobs and fast.dropped == slow.dropped
    assert fast.header == slow.header and (fast.max_nodes, fast.max_procs) == (slow.max_nodes, slow.max_procs)
    assert all(type(j) is TraceJob and type(j.procs) is int and type(j.job_id) is int for j in fast.jobs[:100])


def test_the_vectorised_read_equals_the_line_reader_on_the_fixture_and_extra_fields(tmp_path):
    assert read_swf(SMALL).jobs == read_swf(SMALL, vectorised=False).jobs
    p = write(tmp_path, ["; MaxNodes: 2", "; MaxProcs: 4", swf_line(job=3) + " 5 6",
                         swf_line(job=1, run=0) + " 1 2", swf_line(job=2, alloc=4) + " 7 8",
                         swf_line(job=4, alloc=9) + " 9 9"])
    fast = read_swf(p, extra_fields=("a", "b"))
    slow = read_swf(p, extra_fields=("a", "b"), vectorised=False)
    assert (fast.jobs, fast.extras, fast.dropped) == (slow.jobs, slow.extras, slow.dropped)
    assert [j.job_id for j in fast.jobs] == [2, 3] and fast.extras == [(7.0, 8.0), (5.0, 6.0)]


def _line(job, run="100", tail=""):
    return f"{job} 10 -1 {run} 2 -1 -1 2 200 -1 1 3 -1 -1 -1 -1 -1 -1{tail}"


_HEAD = "; MaxNodes: 4\n; MaxProcs: 8\n"
# name -> (trace text, True if the one-pass reader takes it, False if it leaves it to the
# line reader); either way the result (jobs, or the error naming the line) is the same.
_UNUSUAL = {
    "leading blanks and tabs": (_HEAD + "   " + _line(1) + "\n\t" + _line(2) + "\n", True),
    "CRLF line ends": ((_HEAD + _line(1) + "\n" + _line(2) + "\n").replace("\n", "\r\n"), True),
    "blank lines": (_HEAD + "\n   \n" + _line(1) + "\n\n" + _line(2) + "\n", False),
    "blank lines at the end": (_HEAD + _line(1) + "\n" + _line(2) + "\n\n  \n", True),
    # pandas reads no row at all after a first line of blanks and a comment
    "an indented first header": ("   " + _HEAD + _line(1) + "\n", False),
    "an indented header amid jobs": (_HEAD + _line(1) + "\n   ; note\n" + _line(2) + "\n", False),
    "tabs between fields": (_HEAD + _line(1).replace(" ", "\t") + "\n" + _line(2) + "\n", True),
    "no final newline": (_HEAD + _line(1) + "\n" + _line(2), True),
    "headers only": (_HEAD, True),
    "a plus sign": (_HEAD + _line(1, "+100") + "\n", True),
    "a short line": (_HEAD + _line(1) + "\n" + " ".join(_line(2).split()[:10]) + "\n", False),
    "a long line": (_HEAD + _line(1) + "\n" + _line(2, tail=" 7") + "\n", False),
    "a long first line": (_HEAD + _line(1, tail=" 7") + "\n" + _line(2) + "\n", False),
    "nan": (_HEAD + _line(1) + "\n" + _line(2, "nan") + "\n", False),
    "NA": (_HEAD + _line(1) + "\n" + _line(2, "NA") + "\n", False),
    "inf": (_HEAD + _line(1) + "\n" + _line(2, "inf") + "\n", False),
    "1e400": (_HEAD + _line(1) + "\n" + _line(2, "1e400") + "\n", False),
    "a word": (_HEAD + _line(1) + "\n" + _line(2, "abc") + "\n", False),
    "a quoted number": (_HEAD + _line(1) + "\n" + _line(2, '"100"') + "\n", False),
    "an underscore": (_HEAD + _line(1) + "\n" + _line(2, "1_00") + "\n", False),
    "a decimal comma": (_HEAD + _line(1, "100,5") + "\n" + _line(2) + "\n", False),
    "hexadecimal": (_HEAD + _line(1) + "\n" + _line(2, "0x10") + "\n", False),
    "True": (_HEAD + _line(1) + "\n" + _line(2, "True") + "\n", False),
    "a NUL byte": (_HEAD + _line(1) + "\n" + _line(2, "10\x000") + "\n", False),
    "a repeated job number": (_HEAD + _line(1) + "\n" + _line(1) + "\n", False),
}


def _outcome(path, vectorised: bool):
    """What a reader makes of a trace: (jobs, dropped, header), or its error's text."""
    try:
        t = read_swf(path, vectorised=vectorised)
    except SwfFormatError as exc:
        return str(exc)
    return t.jobs, t.dropped, t.header


@pytest.mark.parametrize("name", list(_UNUSUAL))
def test_the_one_pass_reader_agrees_with_the_line_reader_on_unusual_text(tmp_path, name):
    """pandas' C reader (sim/swf.py ``_job_table``) takes what it reads exactly as the
    line reader would, and leaves anything else to it: quotes are not stripped, 'NA'
    and 'nan' are not missing values, a short or long line is not padded or cut."""
    from coscheduler.sim.swf import _read_fast, _read_text

    text, one_pass = _UNUSUAL[name]
    path = tmp_path / "t.swf"
    path.write_bytes(text.encode("latin-1"))
    assert (_read_fast(str(path), _read_text(path), ()) is not None) is one_pass
    assert _outcome(path, vectorised=True) == _outcome(path, vectorised=False)


def test_the_one_pass_reader_reads_decimals_to_the_last_bit(tmp_path):
    """Submit, run and requested times with up to 12 decimals: the one-pass reader's
    floats are Python's own (the line reader's float())."""
    import random

    from coscheduler.sim.swf import _read_fast, _read_text

    rng = random.Random(7)
    lines = ["; MaxNodes: 4", "; MaxProcs: 8"]
    for job in range(1, 3001):
        submit = f"{rng.uniform(0, 1e7):.{rng.randint(0, 12)}f}"
        run = repr(rng.uniform(1, 1e5))
        req = f"{rng.uniform(1, 1e5):.6e}"
        lines.append(f"{job} {submit} -1 {run} 2 -1 -1 2 {req} -1 1 3 -1 -1 -1 -1 -1 -1")
    path = write(tmp_path, lines)
    assert _read_fast(str(path), _read_text(path), ()) is not None
    assert read_swf(path).jobs == read_swf(path, vectorised=False).jobs


_PIECES = ["; MaxNodes: 4", "; MaxProcs: 8", "  ; MaxProcs: 8", "", "   ", "; note", "\t; note"]


def test_the_one_pass_reader_agrees_with_the_line_reader_on_mixed_traces(tmp_path):
    """Random mixes of headers (indented or not), blank lines, job lines with blanks and
    tabs between fields, short, long, wrong or repeated ones, LF or CRLF: both readers
    give the same trace or the same error."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    job = st.builds(
        lambda j, run, procs, sep, tail: sep.join(
            str(x) for x in [j, 10, -1, run, procs, -1, -1, -1, 200, -1, 1, 3] + [-1] * 6)
        + tail,
        st.integers(1, 6), st.sampled_from([100, 0, 7.25, -1]), st.sampled_from([1, 2, 9]),
        st.sampled_from([" ", "\t", "  "]), st.sampled_from(["", "   ", " 5", " x", " ;c"]))
    path = tmp_path / "t.swf"

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.one_of(job, st.sampled_from(_PIECES)), max_size=12),
           st.sampled_from(["\n", "\r\n"]))
    def check(lines, newline):
        path.write_text(newline.join(["; MaxNodes: 4", "; MaxProcs: 8"] + lines) + newline)
        assert _outcome(path, vectorised=True) == _outcome(path, vectorised=False)

    check()
