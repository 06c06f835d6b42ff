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
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)
    marks = raw.translate(None, _NOT_MARKS)
    if marks.count(b"[") + marks.count(b"{") <= limit:
        return 0
    import numpy as np      # here: the node agent imports this module and needs no numpy

    depth = deepest = 0
    in_string = 0
    for at in range(0, len(marks), _CHUNK):
        a = np.frombuffer(marks, dtype=np.uint8, count=min(_CHUNK, len(marks) - at), offset=at)
        quote = (a == 0x22).view(np.uint8)
        # 1 inside a string: the quotes so far, odd or even (one byte an element)
        inside = np.bitwise_xor.accumulate(quote)
        if in_string:
            inside ^= 1
        in_string = int(inside[-1])
        brackets = a[(quote | inside) == 0]
        if brackets.size:
            # "[" and "{" have the bit 0x02 set, "]" and "}" not: +1 and -1
            steps = (brackets & 2).astype(np.int32) - 1
            levels = np.cumsum(steps)
            levels += depth
            deepest = max(deepest, int(levels.max()))
            depth = int(levels[-1])
            if deepest > limit:
                break
    return deepest


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


def loads(raw: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES,
          max_depth: int = DEFAULT_MAX_DEPTH, what: str = "JSON", strict: bool = False,
          unique_keys: bool = False) -> Any:
    """Parse ``raw`` as JSON of at most ``max_bytes`` bytes and ``max_depth`` levels of
    nesting (``strict``: no NaN/Infinity tokens either); JSONUnusable (a ValueError) names
    ``what`` and the fault. Callers check the values (NaN included) as they use them."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if len(raw) > max_bytes:
        raise JSONUnusable(f"{what}: {len(raw)} bytes, more than the {max_bytes} allowed")
    if nesting_depth(raw, max_depth) > max_depth:
        raise JSONUnusable(f"{what}: nested more than {max_depth} levels deep")
    try:
        text = raw.decode("utf-8")
        hook = {"object_pairs_hook": _unique_keys} if unique_keys else {}
        if strict:
            hook["parse_constant"] = _no_constant
        return json.loads(text, **hook)
    except JSONUnusable:
        raise
    except _DuplicateKey as e:
        raise JSONUnusable(f"{what}: {e}") from None
    except UnicodeDecodeError as e:
        raise JSONUnusable(f"{what}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except RecursionError:
        # invalid JSON whose brackets the scan took for a string's
        raise JSONUnusable(f"{what}: nested more than {max_depth} levels deep") from None
    except (ValueError, OverflowError) as e:
        # JSONDecodeError; an integer of more than 4300 digits
        raise JSONUnusable(f"{what}: not valid JSON ({str(e)[:200]})") from None
