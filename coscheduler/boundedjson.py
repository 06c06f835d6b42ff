"""One JSON loader for everything the project reads from a peer (a Mesos master's events,
a framework's calls to the emulator, the node agent's request bodies and answers, Slurm's
``--json`` output and slurmrestd's bodies, queue, state and progress files other processes
write): bounded in size and in nesting, so that a hostile or broken peer gets a clear error
instead of a RecursionError deep in the interpreter or a 10 GB string in memory.

``read_limited`` reads a stream up to a cap and stops there (one byte past the cap is enough
to know it is too big); ``load_file`` reads a file by ``boundedfile.read_regular`` (opened
without blocking on a FIFO, what is not a regular file refused, a cap on the size).
The nesting is measured before parsing from the brackets outside strings (numpy over the
bytes, a chunk at a time, ``nesting_depth``), so that a 100,000-deep body never reaches the
recursive parser. ``cosched bench json`` prints
what the checks cost beside ``json.loads`` on an answer shaped like ``squeue --json``'s.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import IO, Any, Collection

from . import boundedfile

DEFAULT_MAX_BYTES = 16 << 20
DEFAULT_MAX_DEPTH = 64
_CHUNK = 4 << 20          # the nesting scan's memory: a few times this, whatever the input
# an escape in a string (a backslash and the byte after it), left to right as the parser reads it
_ESCAPE = re.compile(rb"\\.", re.S)
# every byte but brackets and quotes: what the nesting scan drops first
_NOT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"')


class JSONUnusable(ValueError):
    """The text is not plain, bounded JSON; the message says why, without echoing it."""


def is_finite_number(value: Any) -> bool:
    """True for an int or float that is finite as a float (bools are not numbers here).

    JSON integers are unbounded: ``math.isfinite`` raises OverflowError on one past 1e308,
    so a peer's 400-digit "time" must be answered as "not a finite number", not a crash."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _no_constant(name: str) -> Any:
    raise JSONUnusable(f"{name} is not JSON")


def nesting_depth(raw: bytes, limit: int) -> int:
    """The deepest nesting of arrays and objects in ``raw``, strings skipped (0 when there
    are fewer openers than ``limit``: it cannot be deeper); the scan stops once past ``limit``.

    Escapes are dropped first (in valid JSON a backslash is in a string and escapes the next
    byte: read left to right, so an escaped backslash before a quote leaves the quote ending
    the string); what is left of the brackets and quotes is counted a chunk at a time: a
    bracket after an odd number of quotes is in a string. Invalid JSON may count wrong here:
    the parser refuses it (a RecursionError included)."""
    if len(raw) <= limit:
        return 0
    return _depth_of_marks(_marks(raw), limit)


def _marks(raw: bytes) -> bytes:
    """The brackets and quotes of ``raw`` outside escapes (the nesting scan's input)."""
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)
    return raw.translate(None, _NOT_MARKS)


def _check_text(text: str, max_bytes: int, max_depth: int, what: str) -> None:
    """``text``'s size as UTF-8 and its nesting within the bounds, encoded a piece at a time
    so that a large text is never held twice (nor its marks); JSONUnusable otherwise (not
    UTF-8 included)."""
    depth, size = DepthStream(max_depth, what), 0
    for i in range(0, len(text), _CHUNK):
        try:
            piece = text[i:i + _CHUNK].encode("utf-8")
        except UnicodeEncodeError as e:   # a lone surrogate: no UTF-8 text had one
            raise JSONUnusable(f"{what}: not UTF-8 ({e.reason} at character {i + e.start})") from None
        size += len(piece)
        if size > max_bytes:
            raise JSONUnusable(f"{what}: more than the {max_bytes} bytes allowed")
        depth.feed(piece)


class DepthStream:
    """The nesting of a JSON text fed as UTF-8 bytes a piece at a time, as they come (a
    piece may end inside an escape); JSONUnusable naming ``what`` once it is deeper than
    ``max_depth``. As ``nesting_depth``: no numpy scan while there are fewer openers in all
    than the limit (the node agent reads small JSON and needs no numpy)."""

    def __init__(self, max_depth: int, what: str = "JSON"):
        self.max_depth, self.what = max_depth, what
        self._carry = b""
        self._pending: list[bytes] | None = []
        self._openers = 0
        self._scan = _DepthScan()

    def feed(self, raw: bytes) -> None:
        if self._carry:
            raw, self._carry = self._carry + raw, b""
        # after an odd run of backslashes the next piece's first byte is the escaped one
        k = len(raw)
        while k and raw[k - 1] == 0x5C:
            k -= 1
        if (len(raw) - k) % 2:
            raw, self._carry = raw[:-1], raw[-1:]
        marks = _marks(raw)
        if self._pending is not None:
            self._pending.append(marks)
            self._openers += marks.count(b"[") + marks.count(b"{")
            if self._openers <= self.max_depth:
                return
            pending, self._pending = self._pending, None
            for m in pending:
                if self._scan.deepest <= self.max_depth:
                    self._scan.feed(m, self.max_depth)
        elif self._scan.deepest <= self.max_depth:
            self._scan.feed(marks, self.max_depth)
        if self._scan.deepest > self.max_depth:
            raise JSONUnusable(f"{self.what}: nested more than {self.max_depth} levels deep")


class _DepthScan:
    """The nesting depth of brackets and quotes (``_marks``) fed in order, a chunk at a
    time: a bracket after an odd number of quotes is in a string."""

    def __init__(self) -> None:
        self.depth = self.deepest = self.in_string = 0

    def feed(self, marks: bytes, limit: int) -> None:
        import numpy as np      # here: the node agent imports this module and needs no numpy

        for at in range(0, len(marks), _CHUNK):
            a = np.frombuffer(marks, dtype=np.uint8, count=min(_CHUNK, len(marks) - at), offset=at)
            quote = (a == 0x22).view(np.uint8)
            # 1 inside a string: the quotes so far, odd or even (one byte an element)
            inside = np.bitwise_xor.accumulate(quote)
            if self.in_string:
                inside ^= 1
            self.in_string = int(inside[-1])
            brackets = a[(quote | inside) == 0]
            if brackets.size:
                # "[" and "{" have the bit 0x02 set, "]" and "}" not: +1 and -1
                steps = (brackets & 2).astype(np.int32) - 1
                levels = np.cumsum(steps)
                levels += self.depth
                self.deepest = max(self.deepest, int(levels.max()))
                self.depth = int(levels[-1])
                if self.deepest > limit:
                    return


def _depth_of_marks(marks: bytes, limit: int) -> int:
    if marks.count(b"[") + marks.count(b"{") <= limit:
        return 0
    scan = _DepthScan()
    scan.feed(marks, limit)
    return scan.deepest


def read_limited(f: IO[bytes], max_bytes: int, what: str) -> bytes:
    """``boundedfile.read_limited``, its fault a JSONUnusable."""
    try:
        return boundedfile.read_limited(f, max_bytes, what)
    except boundedfile.FileUnusable as exc:
        raise JSONUnusable(str(exc)) from None


def read_file(path: str | os.PathLike, max_bytes: int, what: str | None = None, *,
              follow: bool = True, owners: Collection[int] | None = None) -> bytes:
    """``boundedfile.read_regular`` (a regular file only, opened without blocking, at most
    ``max_bytes``), its faults JSONUnusable; FileNotFoundError passes through."""
    try:
        return boundedfile.read_regular(path, max_bytes, what, follow=follow, owners=owners)
    except boundedfile.FileUnusable as exc:
        raise JSONUnusable(str(exc)) from None


def load_file(path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_BYTES,
              max_depth: int = DEFAULT_MAX_DEPTH, what: str | None = None,
              strict: bool = False, follow: bool = True,
              owners: Collection[int] | None = None) -> Any:
    """``loads`` of a file read by ``read_file`` (``what`` defaults to the path)."""
    what = what or str(Path(path))
    return loads(read_file(path, max_bytes, what, follow=follow, owners=owners),
                 max_bytes=max_bytes, max_depth=max_depth, what=what, strict=strict)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """An object whose keys are all different (``unique_keys``: a request body where two
    ``cpu_fraction`` keys would leave which one counts to the parser)."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(f"key {k[:60]!r} given twice in one object")
        out[k] = v
    return out


def checked_text(raw: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_depth: int = DEFAULT_MAX_DEPTH, what: str = "JSON") -> str:
    """``raw`` as text once its size (UTF-8 bytes) and nesting are within the bounds;
    JSONUnusable naming ``what`` otherwise (not UTF-8 included). For a parser that reads the
    text its own way (``slurm_plugin.parse``: a job at a time)."""
    if isinstance(raw, str):
        if len(raw) > max_bytes:          # (a character is at least one byte)
            raise JSONUnusable(f"{what}: more than the {max_bytes} bytes allowed")
        # the bytes a piece at a time: a large text is not held twice for its checks
        _check_text(raw, max_bytes, max_depth, what)
        return raw
    if len(raw) > max_bytes:
        raise JSONUnusable(f"{what}: {len(raw)} bytes, more than the {max_bytes} allowed")
    if nesting_depth(raw, max_depth) > max_depth:
        raise JSONUnusable(f"{what}: nested more than {max_depth} levels deep")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JSONUnusable(f"{what}: not UTF-8 ({e.reason} at byte {e.start})") from None


def loads(raw: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES,
          max_depth: int = DEFAULT_MAX_DEPTH, what: str = "JSON", strict: bool = False,
          unique_keys: bool = False) -> Any:
    """Parse ``raw`` as JSON of at most ``max_bytes`` bytes and ``max_depth`` levels of
    nesting (``strict``: no NaN/Infinity tokens either); JSONUnusable (a ValueError) names
    ``what`` and the fault. Callers check the values (NaN included) as they use them."""
    # A text given is parsed as it is, the bytes made for the checks dropped before the
    # tree is built: a large peer answer (a 100k-job squeue, near a GB) is held once.
    text = checked_text(raw, max_bytes=max_bytes, max_depth=max_depth, what=what)
    del raw
    try:
        hook = {"object_pairs_hook": _unique_keys} if unique_keys else {}
        if strict:
            hook["parse_constant"] = _no_constant
        return json.loads(text, **hook)
    except JSONUnusable:
        raise
    except _DuplicateKey as e:
        raise JSONUnusable(f"{what}: {e}") from None
    except RecursionError:
        # invalid JSON whose brackets the scan took for a string's
        raise JSONUnusable(f"{what}: nested more than {max_depth} levels deep") from None
    except (ValueError, OverflowError) as e:
        # JSONDecodeError; an integer of more than 4300 digits
        raise JSONUnusable(f"{what}: not valid JSON ({str(e)[:200]})") from None
