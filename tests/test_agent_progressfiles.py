"""The agent's reading of jobs' progress files (monitoring/progressfiles.py): files written
by the jobs' users, read by root on every tick."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from coscheduler.progress import MAX_PROGRESS_BYTES, write_progress
from monitoring import progressfiles
from monitoring.progressfiles import ProgressFiles

ME = os.getuid()
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def _read_within(files: ProgressFiles, path: str, owner: int, seconds: float = 2.0):
    """``files.read(path, owner)`` in a thread; fails the test if it has not returned in time."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(files.read(path, owner)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"reading {path} blocked for more than {seconds} s"
    return out[0]


def _old(path: str, seconds_ago: float = 10.0) -> None:
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def test_a_fifo_swapped_in_after_the_check_does_not_block_the_tick(tmp_path, monkeypatch):
    """The job's user replaces its progress file by a FIFO between a check of the path and
    the open. The agent checked with lstat, then opened and blocked on the FIFO for good:
    no more ticks, so no lease lapsed and no quota was lifted. Here lstat is made to say
    "regular file", as when the race is lost."""
    files = ProgressFiles(tmp_path)
    path = str(tmp_path / "job.json")
    os.mkfifo(path)
    write_progress(1, 4, tmp_path / "regular.json")
    regular = os.lstat(tmp_path / "regular.json")
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: regular)
    files.list(1)
    assert _read_within(files, path, ME) is None


def test_a_fifo_at_the_path_is_never_read(tmp_path):
    files = ProgressFiles(tmp_path)
    path = str(tmp_path / "job.json")
    os.mkfifo(path)
    files.list(1)
    assert _read_within(files, path, ME) is None
    # a writer opened on the FIFO does not make it a progress file either
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(fd, json.dumps({"done": 1, "total": 2, "time": 1.0}).encode())
        assert _read_within(files, path, ME) is None
    finally:
        os.close(fd)


def test_a_link_in_place_of_the_file_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.json"
    write_progress(7, 9, secret)
    pdir = tmp_path / "progress"
    pdir.mkdir()
    path = pdir / "job.json"
    path.symlink_to(secret)
    files = ProgressFiles(pdir)
    files.list(1)
    assert _read_within(files, str(path), ME) is None


def test_directories_and_oversized_files_are_not_records(tmp_path):
    files = ProgressFiles(tmp_path)
    (tmp_path / "dir.json").mkdir()
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_PROGRESS_BYTES + 1) + b"{}")
    files.list(1)
    assert files.read(str(tmp_path / "dir.json"), ME) is None
    assert files.read(str(big), ME) is None


def test_a_file_is_read_again_only_when_it_changed(tmp_path):
    files = ProgressFiles(tmp_path)
    path = str(tmp_path / "job.json")
    write_progress(3, 10, path, now=100.0)
    _old(path)
    files.list(1)
    assert files.read(path, ME).done == 3
    for _ in range(5):
        files.list(1)
        assert files.read(path, ME).done == 3
    assert files.reads == 1
    # the project's writer replaces the file (a new inode): seen at once
    write_progress(4, 10, path, now=101.0)
    _old(path)
    files.list(1)
    assert files.read(path, ME).done == 4
    assert files.reads == 2
    # rewritten in place, another size
    with open(path, "w") as f:
        json.dump({"done": 10, "total": 10, "time": 102.0}, f)
    _old(path)
    files.list(1)
    assert files.read(path, ME).done == 10


def test_a_rewrite_within_the_clock_resolution_is_seen(tmp_path):
    """A file modified in the last second is read again even when its inode, size and
    time did not change (a rewrite in place, faster than the file system's clock)."""
    files = ProgressFiles(tmp_path)
    path = str(tmp_path / "job.json")
    with open(path, "w") as f:
        json.dump({"done": 1, "total": 9, "time": 1.0}, f)
    st = os.stat(path)
    files.list(1)
    assert files.read(path, ME).done == 1
    with open(path, "w") as f:   # same size, same inode
        json.dump({"done": 2, "total": 9, "time": 1.0}, f)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))   # and the same time
    assert os.stat(path).st_size == st.st_size
    files.list(1)
    assert files.read(path, ME).done == 2


def test_a_job_without_a_progress_file_costs_no_system_call(tmp_path, monkeypatch):
    files = ProgressFiles(tmp_path)
    write_progress(1, 2, tmp_path / "other.json")
    files.list(1)

    def forbidden(*a, **k):
        raise AssertionError("a system call for a file the listing does not have")

    monkeypatch.setattr(os, "lstat", forbidden)
    monkeypatch.setattr(os, "open", forbidden)
    assert files.read(str(tmp_path / "job.json"), ME) is None
    assert files.read(None, ME) is None


def test_a_file_outside_the_listing_or_an_unlistable_directory_is_looked_at_itself(tmp_path):
    pdir = tmp_path / "progress"
    pdir.mkdir()
    sub = pdir / "sub"
    sub.mkdir()
    write_progress(5, 6, sub / "job.json")
    files = ProgressFiles(pdir)
    files.list(1)
    assert files.read(str(sub / "job.json"), ME).done == 5
    gone = ProgressFiles(tmp_path / "missing")
    gone.list(1)
    write_progress(2, 6, tmp_path / "job.json")
    assert gone.read(str(tmp_path / "job.json"), ME).done == 2


def test_a_removed_file_reads_as_none_and_a_new_one_is_seen(tmp_path):
    files = ProgressFiles(tmp_path)
    path = str(tmp_path / "job.json")
    write_progress(1, 3, path)
    _old(path)
    files.list(1)
    assert files.read(path, ME).done == 1
    os.unlink(path)
    files.list(1)
    assert files.read(path, ME) is None
    write_progress(2, 3, path)
    files.list(1)
    assert files.read(path, ME).done == 2


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"done": -1}', b'{"done": 1, "time": NaN}',
                                 b"\xff\xfe", b"[" * 10_000])
def test_garbage_is_no_record(tmp_path, raw):
    files = ProgressFiles(tmp_path)
    path = tmp_path / "job.json"
    path.write_bytes(raw)
    files.list(1)
    assert files.read(str(path), ME) is None



@as_root
def test_a_file_of_another_user_is_not_the_jobs(tmp_path, caplog):
    """The progress folder is writable by every user: a file another user made at a job's
    path (before the job could) is not read as the job's progress."""
    files = ProgressFiles(tmp_path)
    path = str(tmp_path / "job.json")
    write_progress(99, 100, path)
    os.chown(path, NOBODY, NOBODY)
    files.list(1)
    assert files.read(path, 1000) is None
    assert "belongs to uid 65534" in files.refused[path]
    assert "uid 65534" in caplog.text
    assert files.read(path, 1000) is None   # the same refusal again: told once
    assert "belongs to uid 65534" in files.new_refusal(path)
    assert files.new_refusal(path) is None
    # the same file is its owner's, and root's files are anybody's
    assert files.read(path, NOBODY).done == 99
    assert path not in files.refused
    os.chown(path, 0, 0)
    assert files.read(path, 1000).done == 99


@as_root
def test_a_record_read_for_one_owner_is_not_handed_to_another(tmp_path):
    files = ProgressFiles(tmp_path)
    path = str(tmp_path / "job.json")
    write_progress(5, 10, path)
    os.chown(path, NOBODY, NOBODY)
    _old(path)
    files.list(1)
    assert files.read(path, NOBODY).done == 5
    assert files.read(path, 1000) is None
    assert files.read(path, None) is None   # a job without processes has no progress


def test_a_folder_flooded_with_files_is_not_listed_past_a_bound(tmp_path):
    """Every user may create files in the progress folder: the tick's listing stops after a
    bound, and each job's file is then looked at on its own."""
    files = ProgressFiles(tmp_path)
    write_progress(3, 4, tmp_path / "job.json")
    files.list(2)
    assert files.listed
    for i in range(progressfiles.LISTING_MIN + 10):
        (tmp_path / f"junk-{i}").touch()
    files.list(2)
    assert not files.listed
    assert files.read(str(tmp_path / "job.json"), ME).done == 3
    assert files.read(str(tmp_path / "absent.json"), ME) is None
    # more jobs, a larger bound
    files.list(progressfiles.LISTING_MIN)
    assert files.listed
