"""Lend only what the host leaves idle (pure; DESIGN.md "Lend only what the host leaves idle").

A guest's CPU comes out of its host's quota. Lending a share the host is using slows the
host (issue #19 found half of the loans left the host a quota below its own use), so:

- ``loan``: when a guest joins, its quota in core units is at most the host's idle share,
  ``host quota - host's measured use - margin`` (margin = ``margin`` x the host's cores),
  never above the guest's own usual demand, and no loan at all when that is under
  ``min_share`` of what the guest needs: the guest then waits for a host with more idle
  CPU, or for cores of its own. Issue #19 asked for half; three quarters is the default,
  measured in docs/simulator.md ("A guest waiting for a better host"): the loans between
  half and three quarters of a guest's need cost it more runtime than they saved it wait.
  Without a known use of the host nothing is lent (we do not guess: an unmeasured host
  may be busy); a host not sampled yet whose class was measured before is taken to use
  what its class usually uses (the controller's choice, ``ControllerConfig.
  lend_unsampled_by_class``), and ``revise`` corrects the loan at its first sample.
- ``revise``: every controller tick, with the host's newest use. When the host's headroom
  (its quota minus its use) falls below the margin, its guests shrink first, so the host
  gets back at least its use plus the margin, with room to spare (``hysteresis``); guests
  grow back towards what they were lent only once the headroom exceeds the margin by
  twice that, so a host whose use wobbles does not make its guests' quotas flap.
- ``least_paying_speed`` (the "sooner" rule, ``ControllerConfig.lend_rule``, not the
  default): a loan short of the guest's need is made only if the guest, slower as a guest
  until its host ends, is estimated to end no later than by waiting for cores of its own.

Plain numbers in, plain numbers out; every quantity in cores unless it says fraction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..model import InvalidInput

# A guest never shrinks below this quota fraction of its own cores: a quota of 0 is not a
# quota (cgroups refuse it) and a guest must never be lost, only slowed.
MIN_GUEST_QUOTA = 0.01
# Default headroom above a host's measured use, as a share of its cores.
DEFAULT_MARGIN = 0.1
DEFAULT_HYSTERESIS = 1.0
# The smallest loan, as a share of the guest's need (issue #19's floor was half of it).
DEFAULT_MIN_SHARE = 0.75


def check_margin(margin: object, name: str = "lending margin") -> float:
    """The margin as a share of the host's cores in [0, 1); else a named error."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or math.isnan(margin) \
            or not 0.0 <= margin < 1.0:
        raise InvalidInput(f"{name} must be a share of the host's cores in [0, 1), got {margin!r}")
    return float(margin)


def check_min_share(share: object, name: str = "smallest loan share") -> float:
    """The smallest loan as a share of the guest's need, in (0, 1]; else a named error."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or math.isnan(share) \
            or not 0.0 < share <= 1.0:
        raise InvalidInput(f"{name} must be a share of the guest's need in (0, 1], got {share!r}")
    return float(share)


def check_hysteresis(h: object, name: str = "lending hysteresis") -> float:
    if isinstance(h, bool) or not isinstance(h, (int, float)) or math.isnan(h) \
            or not 0.0 <= h <= 10.0:
        raise InvalidInput(f"{name} must lie in [0, 10], got {h!r}")
    return float(h)


def _used(host_cores: int, host_used_cores: float | None) -> float | None:
    if host_used_cores is None:
        return None
    if isinstance(host_used_cores, bool) or not isinstance(host_used_cores, (int, float)) \
            or not math.isfinite(host_used_cores) or host_used_cores < 0:
        raise InvalidInput(f"host's measured use must be a finite number of cores >= 0, "
                           f"got {host_used_cores!r}")
    return min(float(host_used_cores), float(host_cores))


def guest_need(guest_cores: int, guest_demand_cores: float | None,
               margin: float = DEFAULT_MARGIN) -> float:
    """What a guest needs in cores: its usual demand plus the margin (a quota at its mean
    use would throttle its bursts), or all its cores when its demand is unknown."""
    if guest_demand_cores is None or not math.isfinite(guest_demand_cores) \
            or guest_demand_cores <= 0:
        return float(guest_cores)
    return min(float(guest_cores), float(guest_demand_cores) + margin * guest_cores)


def loan(host_cores: int, lent_cores: float, host_used_cores: float | None, guest_cores: int,
         guest_demand_cores: float | None, margin: float = DEFAULT_MARGIN,
         wanted_fraction: float = 1.0, min_share: float = DEFAULT_MIN_SHARE) -> float | None:
    """The guest's quota fraction (of its own cores) for a new loan, or None: no loan.

    ``lent_cores``: what the host already lends to other guests (its quota is
    ``host_cores - lent_cores``); ``host_used_cores``: its measured use (None: unknown,
    no loan); ``guest_demand_cores``: the guest's usual use (its need is that plus the margin; None:
    it needs all its cores);
    ``wanted_fraction``: at most this share of the guest's cores (the learner's action);
    ``min_share``: no loan below this share of the guest's need."""
    # (Plain numbers skip the checks' calls: one loan is priced per candidate host.)
    m = margin if type(margin) is float and 0.0 <= margin < 1.0 else check_margin(margin)
    if host_cores < 1 or guest_cores < 1:
        raise InvalidInput(f"cores must be >= 1, got host {host_cores!r}, guest {guest_cores!r}")
    if type(host_used_cores) is float and 0.0 <= host_used_cores < math.inf:
        used = min(host_used_cores, float(host_cores))
    else:
        used = _used(host_cores, host_used_cores)
    if used is None:
        return None
    need = guest_need(guest_cores, guest_demand_cores, m)
    idle = host_cores - lent_cores - used - m * host_cores
    give = min(idle, need, wanted_fraction * guest_cores)
    if not (type(min_share) is float and 0.0 < min_share <= 1.0):
        min_share = check_min_share(min_share)
    if give < min_share * need or give <= 0:
        return None
    return max(MIN_GUEST_QUOTA, min(1.0, give / guest_cores))


LEND_RULES = ("share", "sooner")


def check_lend_rule(rule: object, name: str = "lending rule") -> str:
    if rule not in LEND_RULES:
        raise InvalidInput(f"{name} must be one of {', '.join(LEND_RULES)}, got {rule!r}")
    return rule  # type: ignore[return-value]


def guest_finish_s(runtime_s: float, host_left_s: float, speed: float) -> float:
    """Seconds until a guest that needs ``runtime_s`` alone ends, when it runs at ``speed``
    (its loan over its need, at most 1) until its host ends in ``host_left_s`` and then at
    full speed on the cores it holds (the host's end gives its guests their full quota)."""
    v = min(1.0, speed)
    if v <= 0.0:
        return math.inf
    if v * host_left_s >= runtime_s:
        return runtime_s / v
    return host_left_s + (runtime_s - v * host_left_s)


def least_paying_speed(runtime_s: float, host_left_s: float, wait_s: float) -> float:
    """The smallest speed (loan over need) at which a guest finishes no later as a guest
    (``guest_finish_s``) than by waiting ``wait_s`` for cores of its own and then running
    ``runtime_s`` there. 1.0 when nothing less pays: waiting costs nothing (``wait_s`` 0),
    or the estimates are not finite numbers; 0.0 when its host ends now (it gets the host's
    cores) or it never gets cores of its own.

    A loan at speed v < 1 finishes at ``H + R - v H`` while the host runs ``H`` (when v H < R):
    sooner than ``W + R`` exactly when ``v > 1 - W / H``; a guest that ends before its host
    does (v H >= R) finishes at ``R / v``, sooner when ``v > R / (W + R)``."""
    r, h, w = runtime_s, max(0.0, host_left_s), max(0.0, wait_s)
    if not (math.isfinite(r) and math.isfinite(h)) or math.isnan(w) or r <= 0:
        return 1.0
    if h == 0.0 or math.isinf(w):
        return 0.0   # its host ends now, or it never gets cores of its own: any loan
    if w == 0.0:
        return 1.0
    v = 1.0 - w / h
    if v * h < r:   # the guest outlives its host at this speed: the first case holds
        return min(1.0, max(0.0, v))
    return min(1.0, r / (w + r))


@dataclass(frozen=True)
class Loan:
    """One guest on a host: its cores, its quota fraction now, and the most it may have
    (``target``: what it was lent at the start, capped by its usual demand)."""

    guest_job: str
    cores: int
    quota: float
    target: float


def revise(host_cores: int, host_used_cores: float | None, loans: Sequence[Loan],
           margin: float = DEFAULT_MARGIN, hysteresis: float = DEFAULT_HYSTERESIS
           ) -> dict[str, float]:
    """New quota fractions for the guests whose quota should change (others are left out).

    Shrink: when the host's headroom (``host_cores - lent - used``) is below
    ``margin x host_cores``, take back enough from the guests (the largest loans first,
    none below ``MIN_GUEST_QUOTA``) to give the host ``margin x (1 + hysteresis)`` of
    headroom. Grow: only when the headroom is above ``margin x (1 + 2 x hysteresis)``, give
    guests back up to their target while keeping ``margin x (1 + hysteresis)``. Between
    the two, nothing changes. Unknown use: nothing changes."""
    m = check_margin(margin) * host_cores
    h = check_hysteresis(hysteresis)
    used = _used(host_cores, host_used_cores)
    if used is None or not loans:
        return {}
    lent = sum(x.quota * x.cores for x in loans)
    headroom = host_cores - lent - used
    keep = m * (1.0 + h)
    out: dict[str, float] = {}
    if headroom < m - 1e-9:
        take = keep - headroom
        # Largest loans first: the fewest guests change, and small guests keep running.
        for x in sorted(loans, key=lambda x: (-(x.quota * x.cores), x.guest_job)):
            if take <= 1e-12:
                break
            spare = (x.quota - MIN_GUEST_QUOTA) * x.cores
            if spare <= 1e-12:
                continue
            cut = min(spare, take)
            out[x.guest_job] = x.quota - cut / x.cores
            take -= cut
    elif headroom > m * (1.0 + 2.0 * h) + 1e-9:
        give = headroom - keep
        for x in sorted(loans, key=lambda x: x.guest_job):
            if give <= 1e-12:
                break
            room = (min(1.0, x.target) - x.quota) * x.cores
            if room <= 1e-12:
                continue
            add = min(room, give)
            out[x.guest_job] = x.quota + add / x.cores
            give -= add
    return out


__all__ = ["DEFAULT_HYSTERESIS", "DEFAULT_MARGIN", "DEFAULT_MIN_SHARE", "LEND_RULES", "Loan",
           "MIN_GUEST_QUOTA", "check_hysteresis", "check_lend_rule", "check_margin",
           "check_min_share", "guest_finish_s", "guest_need", "least_paying_speed", "loan",
           "revise"]
