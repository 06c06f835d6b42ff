"""coscheduler.outputs: an output is written whole or not at all, never over something that
is not a regular file, and a failure is one OutputError naming the path."""

from __future__ import annotations

import errno
import os
import stat

import numpy as np
import pytest

from coscheduler import outputs
from coscheduler.model import InvalidInput
from coscheduler.progress import check_progress_file, write_json_atomic, write_progress


def _is_fifo(path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


@pytest.mark.parametrize("make", ["fifo", "folder", "link-to-fifo"])
def test_a_target_that_is_not_a_regular_file_is_refused_and_left_alone(tmp_path, make):
    target = tmp_path / "out.json"
    if make == "fifo":
        os.mkfifo(target)
    elif make == "folder":
        target.mkdir()
    else:
        os.mkfifo(tmp_path / "pipe")
        target.symlink_to(tmp_path / "pipe")
    before = os.lstat(target)
    for check in (lambda: outputs.check_output(target),
                  lambda: outputs.write_text(target, "{}"),
                  lambda: write_json_atomic(target, {})):
        with pytest.raises(outputs.OutputError, match="refusing to replace it") as info:
            check()
        assert str(target) in str(info.value)
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out.json"] + (["pipe"] if make == "link-to-fifo" else []))


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "b.json"
    target.write_text("old\n")
    with pytest.raises(outputs.OutputError) as info:
        with outputs.open_output(target) as f:
            f.write("half of it")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(info.value) == f"cannot write {target}: No space left on device"
    assert info.value.errno == errno.ENOSPC
    assert isinstance(info.value, InvalidInput) and isinstance(info.value, OSError)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_a_write_is_renamed_over_the_target_only_when_complete(tmp_path):
    target = tmp_path / "sub" / "c.csv"
    with outputs.open_output(target, newline="") as f:
        f.write("a,b\n")
        assert not target.exists()
    assert target.read_text() == "a,b\n"
    assert [p.name for p in target.parent.iterdir()] == ["c.csv"]


def test_a_symbolic_link_is_replaced_never_the_file_it_names(tmp_path):
    """As root, writing through a link someone left in a shared folder would replace any
    file of the machine (/etc/passwd, say): the link itself is replaced."""
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    outputs.write_text(link, "new")
    assert not link.is_symlink() and link.read_text() == "new" and real.read_text() == "old"


@pytest.mark.parametrize("where", ["/proc/cosched-no-such-output", "under-a-file"])
def test_a_place_where_no_file_can_be_made_is_one_error_naming_it(tmp_path, where):
    if where == "under-a-file":
        (tmp_path / "plain").write_text("x")
        where = str(tmp_path / "plain" / "out.json")
    with pytest.raises(outputs.OutputError, match=f"^cannot write {where}: ") as info:
        outputs.check_output(where)
    assert "\n" not in str(info.value)
    with pytest.raises(outputs.OutputError, match=f"^cannot write {where}: "):
        outputs.write_bytes(where, b"x")
    with pytest.raises(outputs.OutputError, match=f"{where}"):
        outputs.check_output_dir(where)


def test_an_output_folder_that_is_a_file_is_refused(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("x")
    with pytest.raises(outputs.OutputError, match="exists and is a file, not a folder"):
        outputs.check_output_dir(plain)
    assert outputs.check_output_dir(tmp_path / "new" / "dir") == tmp_path / "new" / "dir"
    assert not (tmp_path / "new").exists()   # checked, not made


def test_a_progress_file_replaces_only_a_progress_record(tmp_path):
    own = tmp_path / "p.json"
    write_progress(1, 4, own)
    check_progress_file(own)
    other = tmp_path / "notes.txt"
    other.write_text("not progress")
    with pytest.raises(outputs.OutputError, match="is not a progress file"):
        check_progress_file(other)
    assert other.read_text() == "not progress"


def test_a_model_file_is_never_written_over_a_fifo(tmp_path):
    """``train rlscheduler --out`` a device node or FIFO: the rename used to replace it."""
    from coscheduler.learned.modelfile import write_model_file

    fifo = tmp_path / "m.model"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match="is a FIFO"):
        write_model_file({"kind": "x"}, {"w": np.zeros(2)}, fifo)
    assert _is_fifo(fifo)
    assert [p.name for p in tmp_path.iterdir()] == ["m.model"]


def test_an_output_error_keeps_its_errno_across_processes():
    import pickle

    err = outputs._error("/x", OSError(errno.ENOSPC, "No space left on device"))
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.errno) == (outputs.OutputError, str(err), errno.ENOSPC)


def test_a_new_output_gets_the_mode_open_would_give_and_an_old_one_keeps_its_own(tmp_path):
    # mkstemp's 0600 hid a report that used to be 0644 from everyone but its writer
    old = os.umask(0o022)
    try:
        new = outputs.write_text(tmp_path / "report.txt", "a")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        os.chmod(new, 0o640)
        outputs.write_text(new, "b")
        assert stat.S_IMODE(new.stat().st_mode) == 0o640 and new.read_text() == "b"
        os.umask(0o077)
        outputs.write_bytes(tmp_path / "private.bin", b"x")
        assert stat.S_IMODE((tmp_path / "private.bin").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_an_output_is_on_disk_before_it_is_renamed_over_the_target(tmp_path, monkeypatch):
    order = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (order.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (order.append("replace"), real_replace(a, b))[1])
    outputs.write_text(tmp_path / "r.json", "{}")
    assert order == ["fsync", "replace"]
