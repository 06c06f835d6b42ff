"""Where a command writes a file: all of it or nothing, and never over something that is
not a file.

``check_output`` (and ``check_output_dir`` for a folder of outputs) says before any long
work whether a path can take an output: it refuses a target that exists and is not a
regular file (a device node, FIFO, socket or folder: renaming over one would replace it),
and a place where no file can be made (tried by making and removing a temporary file in
the nearest folder that exists). ``write_text``, ``write_bytes`` and ``open_output`` then
write to a temporary file in the target's folder and rename it over the target only when
it is complete; the temporary file is removed on any failure. Every OSError (read-only
file system, no space left, a parent that is a file, ...) becomes an ``OutputError``, one
line naming the path and the system's reason.
"""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from .model import InvalidInput


class OutputError(InvalidInput, OSError):
    """An output that cannot be written; the message names the path and why. Also an
    OSError (with the system's errno when it came from one), so that callers written
    against a plain write keep working."""

    def __reduce__(self):   # the errno too across processes (OSError's pickle drops it)
        return type(self), self.args, {"errno": self.errno}


_KINDS = ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "of an unknown kind"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _error(path: str | os.PathLike, exc: OSError) -> OutputError:
    if isinstance(exc, OutputError):
        return exc
    err = OutputError(f"cannot write {path}: {_reason(exc)}")
    err.errno = exc.errno
    return err


def _refuse_special(path: Path) -> None:
    """OutputError when ``path`` (its symbolic links followed) exists and is not a
    regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _error(path, exc) from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{path} exists and is {_kind(st.st_mode)}, not a regular file; "
                          "refusing to replace it")


def _probe_folder(path: Path, shown: str | os.PathLike) -> None:
    """OutputError unless a file can be made in ``path``'s nearest existing folder."""
    folder = path
    while True:
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            if folder.parent == folder:
                raise OutputError(f"cannot write {shown}: no such folder") from None
            folder = folder.parent
            continue
        except OSError as exc:
            raise _error(shown, exc) from None
        break
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write {shown}: {folder} is not a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cosched-probe-", dir=folder)
    except OSError as exc:
        raise _error(shown, exc) from None
    os.close(fd)
    os.unlink(tmp)


def check_output(path: str | os.PathLike) -> Path:
    """``path`` as a Path when an output file can be written there, else OutputError."""
    target = Path(path)
    _refuse_special(target)
    _probe_folder(target.parent, path)
    return target


def check_output_dir(path: str | os.PathLike) -> Path:
    """``path`` as a Path when it is (or can be made as) a folder files can be written in,
    else OutputError."""
    target = Path(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        _probe_folder(target.parent, path)
        return target
    except OSError as exc:
        raise _error(path, exc) from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{path} exists and is {_kind(st.st_mode)}, not a folder")
    _probe_folder(target, path)
    return target


def make_output_dir(path: str | os.PathLike) -> Path:
    """The folder ``path``, made with its parents when missing; OutputError when it cannot
    be."""
    target = check_output_dir(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _error(path, exc) from None
    return target


@contextmanager
def open_output(path: str | os.PathLike, mode: str = "w", prefix: str | None = None,
                make_parents: bool = True, **kwargs) -> Iterator[IO]:
    """A file object for writing ``path``: it is a temporary file beside the target,
    renamed over it when the ``with`` block ends normally and removed when it does not.
    A symbolic link at ``path`` is replaced, never the file it names: a command run as root
    must not write through a link someone else left in a shared folder. ``mode`` is ``"w"``
    or ``"wb"``; the target's missing folders are made unless ``make_parents`` is False;
    ``kwargs`` go to ``os.fdopen`` (``newline=...``)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_output writes with 'w' or 'wb', not {mode!r}")
    given = Path(path)
    _refuse_special(given)
    target = given
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=prefix or f".{target.name}.", suffix=".tmp",
                                   dir=target.parent)
    except OSError as exc:
        raise _error(path, exc) from None
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            # on disk before the rename: after a crash the target is the old or the new
            # file, never an empty one (ext4 and XFS may commit the rename first)
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), _mode_for(target))
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise _error(path, exc) from None
        raise


def _umask() -> int:
    try:   # (Linux 4.7+: read without setting it, which would race other threads)
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(target: Path) -> int:
    """The mode the output gets: an existing file's own, else what ``open`` would give
    (0666 less the umask). mkstemp makes its file 0600, which would hide a report that
    was readable before from everyone but its writer."""
    try:
        st = os.stat(target, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~_umask()


def write_bytes(path: str | os.PathLike, data: bytes, prefix: str | None = None,
                make_parents: bool = True) -> Path:
    """``data`` to ``path``, all of it or nothing (``open_output``)."""
    with open_output(path, "wb", prefix=prefix, make_parents=make_parents) as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, prefix: str | None = None,
               make_parents: bool = True) -> Path:
    """``text`` to ``path``, all of it or nothing (``open_output``)."""
    with open_output(path, "w", prefix=prefix, make_parents=make_parents) as f:
        f.write(text)
    return Path(path)


def save_figure(fig, path: str | os.PathLike, **kwargs) -> Path:
    """A matplotlib figure to ``path`` (its format from the suffix, PNG without one), all
    of it or nothing (``open_output``); ``kwargs`` go to ``savefig``."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with open_output(path, "wb") as f:
        fig.savefig(f, format=fmt, **kwargs)
    return Path(path)
