"""A job's role on shared cores, and what it means to the kernel's CPU scheduler.

The controller lends part of a running host job's cores to a guest job. The quota
(``cpu.max`` / ``cpu.cfs_quota_us``) caps each of them; the role decides who wins when both
want the same core inside a period (ASA_X: "do not hurt the host"):

* guest, cgroup v2: ``cpu.idle = 1`` (kernel >= 5.15): the group is SCHED_IDLE against its
  siblings, so it runs only on what its host leaves;
* host, cgroup v2: ``cpu.weight = HOST_WEIGHT`` (default 100);
* cgroup v1 has no ``cpu.idle``; ``cpu.shares`` is the analogue of ``cpu.weight``
  (1024 = weight 100): a guest gets the smallest share the kernel takes (2, the v1 twin of
  the weight 3 the kernel gives an idle v2 group), a host ``HOST_WEIGHT`` scaled to shares.

A site whose guests wait on messages or files in short rounds can run guests at a plain
weight instead (``cosched agent --guest-weight N``): SCHED_IDLE makes each of a guest's
wake-ups wait behind every runnable task of its host's cores, and a latency-bound guest pays
that on every round. With weight N the guest is an ordinary group of weight N against its
host's ``HOST_WEIGHT``, still capped by its quota: the host keeps at least
``HOST_WEIGHT / (HOST_WEIGHT + N)`` of a core both want (0.91 at N = 100).

No role (``None``) means the defaults: ``cpu.idle 0``, ``cpu.weight 100``, ``cpu.shares 1024``.
Pure data; ``execute.py`` writes the files.
"""

from __future__ import annotations

from coscheduler.model import InvalidInput

HOST, GUEST = "host", "guest"
ROLES = (HOST, GUEST)

DEFAULT_WEIGHT = 100      # cgroup v2's cpu.weight default
DEFAULT_SHARES = 1024     # cgroup v1's cpu.shares default (the same share as weight 100)
# A lending host's cpu.weight: ten times the default. Where its guest is idle the host wins
# every contention anyway; where the guest cannot be made idle (a kernel before 5.15 has no
# cpu.idle) or is another sibling at the default weight, it still gets at most
# 100 / (1000 + 100) = 9 % of a core both want: the host keeps >= 0.9 of it.
HOST_WEIGHT = 1000
GUEST_SHARES = 2          # the kernel's smallest cpu.shares
MAX_WEIGHT = 10000        # the kernel's largest cpu.weight


def check_role(value: object) -> str | None:
    """A role from a request: "host", "guest", or None (no role: the defaults)."""
    if value is None or value in ROLES:
        return value  # type: ignore[return-value]
    raise InvalidInput(f"role must be 'host', 'guest' or null, got {str(value)[:40]!r}")


def check_guest_weight(value: object) -> int | None:
    """A guest's CPU weight from a setting: "idle" or None (the idle class, the default) or
    an integer cpu.weight 1..MAX_WEIGHT."""
    if value is None or value == "idle":
        return None
    try:
        weight = int(str(value), 10)
    except ValueError:
        weight = 0
    if not 1 <= weight <= MAX_WEIGHT:
        raise InvalidInput(f"guest weight must be 'idle' or an integer cpu.weight 1..{MAX_WEIGHT}, "
                           f"got {str(value)[:40]!r}")
    return weight


def role_files(role: str | None, version: int,
               guest_weight: int | None = None) -> list[tuple[str, str]]:
    """The cgroup files and values a job of ``role`` should hold, in the order to write them.

    v2 writes ``cpu.idle`` first: the kernel refuses a ``cpu.weight`` write in an idle
    group (EINVAL), sets an idle group's weight to its idle minimum, and gives a group it
    makes busy again the default weight. A guest's ``cpu.weight`` is therefore not its own
    to set (it reads 1 while idle) and is not listed. ``guest_weight`` (None: idle) is the
    weight of a guest that is not idle (check_guest_weight)."""
    weight = {HOST: HOST_WEIGHT, GUEST: guest_weight}.get(role or "", DEFAULT_WEIGHT)
    if version == 1:
        shares = GUEST_SHARES if weight is None else weight * DEFAULT_SHARES // DEFAULT_WEIGHT
        return [("cpu.shares", str(max(GUEST_SHARES, shares)))]
    if weight is None:
        return [("cpu.idle", "1")]
    return [("cpu.idle", "0"), ("cpu.weight", str(weight))]
