"""Old per-job files removed from folders every user may write to (coscheduler/oldfiles.py)."""

from __future__ import annotations

import os
import re
import time

from coscheduler.oldfiles import Retention, prune_old_files, remove_file_in

JSON = re.compile(r".+\.json")


def _make(path, age_s: float = 0.0, text: str = "{}") -> None:
    with open(path, "w") as f:
        f.write(text)
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_old_matching_files_go_and_the_rest_stay(tmp_path):
    week = 7 * 86400
    _make(tmp_path / "old.json", week + 60)
    _make(tmp_path / "kept.json", week + 60)
    _make(tmp_path / "new.json")
    _make(tmp_path / "old.txt", week + 60)
    (tmp_path / "dir.json").mkdir()
    os.utime(tmp_path / "dir.json", (0, 0))
    outside = tmp_path.parent / f"{tmp_path.name}-target.json"
    _make(outside, week + 60)
    os.symlink(outside, tmp_path / "link.json")
    os.utime(tmp_path / "link.json", (0, 0), follow_symlinks=False)
    n = prune_old_files(tmp_path, time.time() - week, JSON, keep={"kept.json"})
    assert n == 2   # old.json and the link itself
    assert sorted(os.listdir(tmp_path)) == ["dir.json", "kept.json", "new.json", "old.txt"]
    assert outside.exists()   # the link was removed, not followed
    outside.unlink()


def test_a_flooded_folder_costs_a_bounded_scan(tmp_path):
    for k in range(50):
        _make(tmp_path / f"{k}.json", 3600)
    assert prune_old_files(tmp_path, time.time(), JSON, max_entries=10) == 10
    assert len(os.listdir(tmp_path)) == 40


def test_a_missing_folder_or_a_link_to_one_is_logged_not_raised(tmp_path, caplog):
    assert prune_old_files(tmp_path / "missing", time.time(), JSON) == 0
    (tmp_path / "real").mkdir()
    _make(tmp_path / "real" / "a.json", 3600)
    os.symlink(tmp_path / "real", tmp_path / "swapped")
    assert prune_old_files(tmp_path / "swapped", time.time(), JSON) == 0
    assert (tmp_path / "real" / "a.json").exists()
    assert "not pruned" in caplog.text


def test_remove_file_in_takes_plain_names_only(tmp_path):
    (tmp_path / "sub").mkdir()
    _make(tmp_path / "sub" / "x.json")
    _make(tmp_path / "y.json")
    assert remove_file_in(tmp_path, "sub/x.json") is False
    assert remove_file_in(tmp_path, "..") is False
    assert remove_file_in(tmp_path, "sub") is False          # a directory stays
    assert remove_file_in(tmp_path, "y.json") is True
    assert remove_file_in(tmp_path, "y.json") is False       # already gone
    assert (tmp_path / "sub" / "x.json").exists()


def test_retention_runs_at_most_once_per_interval():
    r = Retention(kept_s=100.0, every_s=10.0)
    seen: list[float] = []
    assert r.run(lambda before: seen.append(before) or 1, now=1000.0) == 1
    assert r.run(lambda before: seen.append(before) or 1, now=1005.0) is None
    assert r.run(lambda before: seen.append(before) or 2, now=1010.0) == 2
    assert seen == [900.0, 910.0]
