"""Resource arithmetic of the emulated master: pure functions over plain data.

Mesos (``include/mesos/v1/mesos.proto``, ``Resource`` and ``Value``) describes a resource
by name and type: SCALAR (``cpus``, ``mem``, ``disk``; mem and disk in MB), RANGES
(``ports``) or SET. Scalars keep three decimal digits ("floating point values are converted
to a fixed point format that supports three decimal digits of precision"), so they are held
here as integer thousandths, which makes subset tests exact.

Only unreserved resources (role ``*``) exist in the emulator: a resource with another role,
``reservations``, ``disk`` info, ``revocable`` or ``shared`` is refused with a clear reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coscheduler.boundedjson import is_finite_number

# The hierarchical allocator's default minimum to offer (master flag
# --min_allocatable_resources, default "cpus:0.01|mem:32").
MIN_CPUS_MILLI = 10
MIN_MEM_MILLI = 32_000
MAX_SCALAR = 1e15


class ResourceError(ValueError):
    """A resource description the emulator cannot use; the message names the field."""


@dataclass
class Resources:
    """Scalars in thousandths; ranges as sorted, merged, inclusive (begin, end) pairs."""

    scalars: dict[str, int] = field(default_factory=dict)
    ranges: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def copy(self) -> "Resources":
        return Resources(dict(self.scalars), {k: list(v) for k, v in self.ranges.items()})

    def is_empty(self) -> bool:
        return not any(self.scalars.values()) and not any(self.ranges.values())

    def scalar(self, name: str) -> float:
        return self.scalars.get(name, 0) / 1000.0

    def __add__(self, other: "Resources") -> "Resources":
        out = self.copy()
        for k, v in other.scalars.items():
            out.scalars[k] = out.scalars.get(k, 0) + v
        for k, v in other.ranges.items():
            out.ranges[k] = _merge(out.ranges.get(k, []) + list(v))
        return out

    def __sub__(self, other: "Resources") -> "Resources":
        """self - other; the caller checks ``contains`` first (never goes below zero)."""
        out = self.copy()
        for k, v in other.scalars.items():
            out.scalars[k] = max(0, out.scalars.get(k, 0) - v)
            if out.scalars[k] == 0:
                del out.scalars[k]
        for k, v in other.ranges.items():
            left = _subtract_ranges(out.ranges.get(k, []), v)
            if left:
                out.ranges[k] = left
            else:
                out.ranges.pop(k, None)
        return out

    def contains(self, other: "Resources") -> bool:
        for k, v in other.scalars.items():
            if v > self.scalars.get(k, 0):
                return False
        for k, v in other.ranges.items():
            if _subtract_ranges(v, self.ranges.get(k, [])):
                return False
        return True

    def allocatable(self) -> bool:
        """Enough to be worth an offer (the allocator's default minimum)."""
        return (self.scalars.get("cpus", 0) >= MIN_CPUS_MILLI
                or self.scalars.get("mem", 0) >= MIN_MEM_MILLI)

    def to_json(self, role: str | None = None) -> list[dict[str, Any]]:
        """``Resource`` messages as the master sends them in an offer."""
        out: list[dict[str, Any]] = []
        for name in sorted(self.scalars):
            r: dict[str, Any] = {"name": name, "type": "SCALAR",
                                 "scalar": {"value": self.scalars[name] / 1000.0}, "role": "*"}
            if role is not None:
                r["allocation_info"] = {"role": role}
            out.append(r)
        for name in sorted(self.ranges):
            r = {"name": name, "type": "RANGES", "role": "*",
                 "ranges": {"range": [{"begin": b, "end": e} for b, e in self.ranges[name]]}}
            if role is not None:
                r["allocation_info"] = {"role": role}
            out.append(r)
        return out

    def describe(self) -> dict[str, Any]:
        """Plain summary for logs and the admin state: {"cpus": 2.0, "ports": "31000-31009"}."""
        d: dict[str, Any] = {k: v / 1000.0 for k, v in sorted(self.scalars.items())}
        for k, v in sorted(self.ranges.items()):
            d[k] = ",".join(f"{b}-{e}" for b, e in v)
        return d


def _merge(rs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b, e in sorted(rs):
        if out and b <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((b, e))
    return out


def _subtract_ranges(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ranges ``a`` not covered by ``b``."""
    out = []
    for lo, hi in _merge(list(a)):
        cur = lo
        for b_lo, b_hi in _merge(list(b)):
            if b_hi < cur or b_lo > hi:
                continue
            if b_lo > cur:
                out.append((cur, b_lo - 1))
            cur = max(cur, b_hi + 1)
            if cur > hi:
                break
        if cur <= hi:
            out.append((cur, hi))
    return out


def scalar_milli(value: float) -> int:
    """Round to the three decimal digits Mesos keeps."""
    return int(round(value * 1000))


def parse_resources(items: Any, where: str) -> Resources:
    """``repeated Resource`` (already type-checked JSON) -> Resources.

    Raises ResourceError naming ``where`` and the resource for what the emulator cannot
    offer or account: reserved, revocable, shared or disk-info resources, SET resources,
    negative or non-finite scalars, inverted ranges.
    """
    out = Resources()
    for i, r in enumerate(items or []):
        name = r.get("name")
        at = f"{where}.resources[{i}] ({name})"
        if not name:
            raise ResourceError(f"{at}: 'name' must be a non-empty string")
        role = r.get("role", "*")
        if role != "*" or r.get("reservations") or r.get("reservation"):
            raise ResourceError(f"{at}: reserved resources (role {role!r}) are not supported by "
                                "the emulator; only unreserved ('*') resources exist")
        for unsupported in ("disk", "revocable", "shared", "provider_id"):
            if r.get(unsupported) is not None:
                raise ResourceError(f"{at}: '{unsupported}' resources are not supported by the emulator")
        rtype = r.get("type")
        if rtype == "SCALAR":
            sc = r.get("scalar")
            if not isinstance(sc, dict) or "value" not in sc:
                raise ResourceError(f"{at}: a SCALAR resource needs 'scalar': {{'value': number}}")
            v = sc["value"]
            if not is_finite_number(v):
                raise ResourceError(f"{at}: scalar value must be a finite number, got {v!r}")
            if v < 0:
                raise ResourceError(f"{at}: scalar value must be >= 0, got {v!r}")
            if v > MAX_SCALAR:
                raise ResourceError(f"{at}: scalar value {v!r} is too large")
            out.scalars[name] = out.scalars.get(name, 0) + scalar_milli(float(v))
        elif rtype == "RANGES":
            rg = (r.get("ranges") or {}).get("range") or []
            pairs = []
            for j, x in enumerate(rg):
                b, e = x.get("begin"), x.get("end")
                if not isinstance(b, int) or not isinstance(e, int) or b < 0 or e < b:
                    raise ResourceError(f"{at}: range[{j}] must have integers 0 <= begin <= end, "
                                        f"got {x!r}")
                pairs.append((b, e))
            out.ranges[name] = _merge(out.ranges.get(name, []) + pairs)
        else:
            raise ResourceError(f"{at}: resource type {rtype!r} is not supported by the emulator "
                                "(SCALAR and RANGES are)")
    return out


def agent_resources(cpus: float, mem_mb: float, disk_mb: float | None = None,
                    ports: tuple[int, int] | None = None) -> Resources:
    """An agent's total resources from its command-line description."""
    res = Resources({"cpus": scalar_milli(cpus), "mem": scalar_milli(mem_mb)})
    if disk_mb:
        res.scalars["disk"] = scalar_milli(disk_mb)
    if ports:
        res.ranges["ports"] = [tuple(ports)]  # type: ignore[list-item]
    return res


def parse_port_range(text: str) -> tuple[int, int]:
    """``31000-32000`` -> (31000, 32000)."""
    lo, sep, hi = text.partition("-")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
        raise ResourceError(f"port range {text!r} must look like 31000-32000")
    b, e = int(lo), int(hi)
    if not 0 < b <= e <= 65535:
        raise ResourceError(f"port range {text!r} must satisfy 0 < begin <= end <= 65535")
    return b, e


def dominant_share(used: Resources, total: Resources) -> float:
    """The largest share of any cpus/mem the allocation holds (DRF's ordering key)."""
    shares = [used.scalars.get(k, 0) / total.scalars[k]
              for k in ("cpus", "mem") if total.scalars.get(k)]
    return max(shares, default=0.0)
