"""Slurm host lists (``rn[1-3,5],gpu01``, ``r[1-2]n[01-04]``) expanded to node names, with
a bound: the node agent (root) reads them from the environment of a job's processes, which
the job's user sets, so ``n[0-999999999]`` must be refused, not built. Pure."""

from __future__ import annotations

import re

MAX_HOSTS = 100_000    # more nodes than any cluster has
MAX_GROUPS = 8         # bracket groups in one name (r[1-2]n[01-04] has two)

_BRACKETED = re.compile(r"([^\[\]]*)\[([^\]]+)\](.*)")


class HostListError(ValueError):
    """Not a host list, or one naming more than the limit's hosts."""


def expand(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """The names in a host list, in order, zero padding kept. HostListError when it is
    malformed or names more than ``limit`` hosts (counted before any is built)."""
    parts, depth, cur = [], 0, []
    for ch in text:      # split on the commas outside brackets
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    if depth != 0:
        raise HostListError(f"malformed host list {text[:200]!r}: unbalanced brackets")
    out: list[str] = []
    for part in parts:
        part = part.strip()
        if part:
            _expand_part(part, text, limit, out)
    return out


def _expand_part(part: str, text: str, limit: int, out: list[str]) -> None:
    if part.count("[") > MAX_GROUPS:   # (each group is a level of recursion below)
        raise HostListError(f"malformed host list {text[:200]!r}: more than {MAX_GROUPS} "
                            "bracket groups in one name")
    m = _BRACKETED.fullmatch(part)
    if not m:
        if "[" in part or "]" in part:
            raise HostListError(f"malformed host list {text[:200]!r}")
        if len(out) >= limit:
            raise HostListError(f"host list {text[:200]!r} names more than {limit} hosts")
        out.append(part)
        return
    prefix, ranges, suffix = m.groups()
    numbers: list[tuple[int, int, int]] = []     # (low, high, width)
    count = 0
    for r in ranges.split(","):
        lo, sep, hi = r.strip().partition("-")
        # (ASCII only: str.isdigit() also takes '¹', which int() refuses)
        if not _digits(lo) or (sep and not _digits(hi)) or len(lo) > 9 or len(hi) > 9:
            raise HostListError(f"malformed host list {text[:200]!r}")
        low, high = int(lo), int(hi) if sep else int(lo)
        if high < low:
            raise HostListError(f"malformed host list {text[:200]!r}: range {r!r} runs backwards")
        count += high - low + 1
        if len(out) + count > limit:
            raise HostListError(f"host list {text[:200]!r} names more than {limit} hosts")
        numbers.append((low, high, len(lo)))
    tails = expand(suffix, limit) if suffix else [""]
    if len(out) + count * len(tails) > limit:
        raise HostListError(f"host list {text[:200]!r} names more than {limit} hosts")
    for low, high, width in numbers:
        for i in range(low, high + 1):
            for tail in tails:
                out.append(f"{prefix}{i:0{width}d}{tail}")


def _digits(s: str) -> bool:
    return s.isascii() and s.isdigit()


__all__ = ["HostListError", "MAX_GROUPS", "MAX_HOSTS", "expand"]
