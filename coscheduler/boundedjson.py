"""One JSON loader for everything the project reads from a peer (a Mesos master's events,
a framework's calls to the emulator, the node agent's request bodies and answers, state and
progress files other processes write): bounded in size and in nesting, so that a hostile or
broken peer gets a clear error instead of a RecursionError deep in the interpreter.

The nesting is measured before parsing from the brackets outside strings (a regular expression
drops the strings, a translation keeps the brackets: the Python loop runs per bracket only), so that a
100,000-deep body never reaches the recursive parser.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

DEFAULT_MAX_BYTES = 16 << 20
DEFAULT_MAX_DEPTH = 64
# a string with its escapes (removed before the brackets are counted)
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN_AS_1 = bytes.maketrans(b"[{]}", b"\x01\x01\x00\x00")
_STEP = (-1, 1)


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
    are fewer openers than ``limit``: it cannot be deeper)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return 0
    brackets = _STRINGS.sub(b"", raw).translate(_OPEN_AS_1, _NOT_BRACKETS)
    return max(accumulate(_STEP[b] for b in brackets), default=0)


def loads(raw: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES,
          max_depth: int = DEFAULT_MAX_DEPTH, what: str = "JSON", strict: bool = False) -> Any:
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
        return json.loads(text, parse_constant=_no_constant) if strict else json.loads(text)
    except JSONUnusable:
        raise
    except UnicodeDecodeError as e:
        raise JSONUnusable(f"{what}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except (ValueError, RecursionError, OverflowError) as e:
        # JSONDecodeError; an integer of more than 4300 digits
        raise JSONUnusable(f"{what}: not valid JSON ({str(e)[:200]})") from None
