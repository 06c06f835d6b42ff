"""The timeline picture (coscheduler.experiments.timeline): rows laid out as a scheduler
would hold cores, and a PNG drawn from plain data."""

from __future__ import annotations

import pytest

from coscheduler.experiments.timeline import (Timeline, TimelineJob, draw_timeline,
                                              from_records, lay_out)
from coscheduler.model import InvalidInput


def test_jobs_never_share_rows_while_they_run_and_guests_sit_in_their_hosts_rows():
    jobs = [TimelineJob("a", "x", 0, 10, 4), TimelineJob("b", "x", 0, 5, 2),
            TimelineJob("c", "y", 5, 12, 3),        # takes b's rows and one more
            TimelineJob("g1", "y", 2, 8, 2, host="a"), TimelineJob("g2", "y", 3, 6, 2, host="a")]
    pieces = lay_out(jobs)
    rows = {j: {r + k for r, n in p for k in range(n)} for j, p in pieces.items()}
    assert rows["a"] == {0, 1, 2, 3} and rows["b"] == {4, 5}
    assert rows["c"] == {4, 5, 6}                   # lowest rows free from t = 5
    assert rows["g1"] | rows["g2"] <= rows["a"] and not rows["g1"] & rows["g2"]
    assert pieces["c"] == [(4, 3)]


def test_rows_need_not_be_consecutive():
    jobs = [TimelineJob("a", "x", 0, 10, 2), TimelineJob("b", "x", 0, 4, 2),
            TimelineJob("c", "x", 0, 10, 2), TimelineJob("d", "x", 5, 10, 4)]
    pieces = lay_out(jobs)
    assert pieces["d"] == [(2, 2), (6, 2)]          # b's freed rows and two above c


def test_draws_a_png_from_records(tmp_path):
    jobs = [TimelineJob("h", "montage", 0, 100, 8), TimelineJob("g", "blast", 10, 80, 4, "h")]
    tl = from_records("test", jobs, 8, quota_log=[(10.0, "h", 0.75), (40.0, "g", 0.2)],
                      start_quotas={"g": 0.5},
                      use_log=[(0.0, "h", 0.3), (50.0, "h", 0.6)], rounds=[100.0])
    assert tl.quotas["g"] == [(10, 0.5), (40.0, 0.2)] and tl.use["h"][1] == (50.0, 0.6)
    path = draw_timeline(tl, tmp_path / "t.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    with pytest.raises(InvalidInput, match="no jobs"):
        draw_timeline(Timeline("empty", (), 8), tmp_path / "e.png")
