"""One way to read a file the user or another process names (a trace, a model file, a
token or secret, a JSON file a peer writes): a regular file only, opened without blocking
(a FIFO put at the path is refused, not waited on; a device such as /dev/zero is refused
too), and never more than a cap in memory: the size is checked before reading and the read
stops one byte past the cap (a file that grows meanwhile is caught too). ``gunzip``
unpacks a gzip stream in pieces up to a cap of its own (a 14 MB file may unpack to 3 GB).

Every fault is a ``FileUnusable`` (a ValueError, an ``InvalidInput``) whose message names
the file and what is wrong, in one line; a file that does not exist raises
FileNotFoundError (callers word "not found" their own way).
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import zlib
from typing import IO, Collection

from .model import InvalidInput

_READ = 1 << 20


class FileUnusable(InvalidInput):
    """A file that cannot be read as asked; the message names it and says why."""


class FileTooLarge(FileUnusable):
    """A file (or what it unpacks to) past the cap: readable, but not what was meant to be
    there (a caller may set it aside, where it would leave a file it cannot open)."""


def read_limited(f: IO[bytes], max_bytes: int, what: str, hint: str = "") -> bytes:
    """At most ``max_bytes`` bytes of the binary stream ``f`` (read in pieces);
    FileUnusable naming ``what`` when there is more, without reading the rest."""
    parts, size = [], 0
    while size <= max_bytes:
        part = f.read(min(_READ, max_bytes + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    if size > max_bytes:
        raise FileTooLarge(f"{what}: more than the {max_bytes} bytes allowed{hint}")
    return b"".join(parts)


def describe(mode: int) -> str:
    """What a file that is not a regular file is, for an error message."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return f"file type {stat.S_IFMT(mode):o}"


def _open(path: str | os.PathLike, what: str, follow: bool) -> int:
    """A descriptor of ``path`` opened without blocking, read-only; FileUnusable unless
    it is a regular file (FileNotFoundError passes through)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        why = ("a symbolic link, not followed" if not follow and exc.errno == errno.ELOOP
               else exc.strerror or exc)
        raise FileUnusable(f"{what}: cannot be opened ({why})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileUnusable(f"{what}: not a regular file ({describe(mode)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike, max_bytes: int, what: str | None = None, *,
                 follow: bool = True, owners: Collection[int] | None = None,
                 hint: str = "") -> bytes:
    """A regular file's bytes, at most ``max_bytes``. ``follow=False``: a symbolic link is
    refused; ``owners``: the uids the file may belong to; ``hint``: said after a "too
    large" error (how to allow more). FileNotFoundError passes through; every other fault
    is FileUnusable naming ``what`` (default: the path)."""
    what = what or os.fspath(path)
    fd = _open(path, what, follow)
    try:
        st = os.fstat(fd)
        if owners is not None and st.st_uid not in owners:
            raise FileUnusable(f"{what}: belongs to uid {st.st_uid}, not to "
                               f"{' or '.join(f'uid {u}' for u in sorted(owners))}")
        if st.st_size > max_bytes:     # said at once; a file that grows is caught by the read
            raise FileTooLarge(f"{what}: {st.st_size} bytes, more than the {max_bytes} "
                               f"allowed{hint}")
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
            return read_limited(f, max_bytes, what, hint)
    except OSError as exc:
        raise FileUnusable(f"{what}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike, what: str | None = None) -> IO[bytes]:
    """A regular file opened for reading as ``read_regular`` opens it (a FIFO refused, not
    waited on), for a reader that bounds itself (a zip archive's listed sizes); the
    same faults. The caller closes it."""
    return os.fdopen(_open(path, what or os.fspath(path), True), "rb")


def read_head(path: str | os.PathLike, size: int, what: str | None = None) -> bytes:
    """The first ``size`` bytes (or fewer) of a regular file, opened as ``read_regular``
    opens it; the same faults."""
    what = what or os.fspath(path)
    fd = _open(path, what, True)
    try:
        return os.read(fd, size)
    except OSError as exc:
        raise FileUnusable(f"{what}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def gunzip(raw: bytes, max_bytes: int, what: str, hint: str = "") -> bytes:
    """The gzip stream ``raw`` unpacked (every member), at most ``max_bytes`` bytes.
    Unpacked twice: first counted a piece at a time (nothing kept, so a stream that
    unpacks past the cap costs no memory and stops one piece past it), then kept.
    FileUnusable naming ``what`` otherwise."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as f:
            size = 0
            while size <= max_bytes:
                n = len(f.read(_READ))
                if not n:
                    break
                size += n
        if size > max_bytes:
            raise FileTooLarge(f"{what}: unpacks to more than the {max_bytes} bytes "
                               f"allowed{hint}")
        with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as f:
            return read_limited(f, max_bytes, what, hint)
    except (OSError, EOFError, zlib.error) as exc:
        raise FileUnusable(f"{what}: not a readable gzip file ({exc})") from None


def read_line_secret(path: str | os.PathLike, what: str, *, max_bytes: int = 64 << 10,
                     follow: bool = True) -> str:
    """The first non-empty line of a small UTF-8 file (a token, a password), stripped;
    FileUnusable naming ``what`` (never the content) when it cannot be read, is not
    UTF-8 or holds no such line; FileNotFoundError as ``read_regular``."""
    raw = read_regular(path, max_bytes, what, follow=follow)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileUnusable(f"{what}: not UTF-8 text (byte {exc.start})") from None
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    if not line:
        raise FileUnusable(f"{what}: empty (no line holds a secret)")
    return line
