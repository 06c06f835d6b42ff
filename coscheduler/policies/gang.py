"""First-fit gang allocation, as pure functions over plain data.

A rigid job starts only with all its cores at once (gang): ``Job.cores`` split over exactly
``Job.nodes`` nodes as ``Job.cores_per_node()`` says (parts differ by at most one core).

- ``first_fit``: place a job on free cores per node (nodes in the order given, which is
  the cluster's first-fit order). Space sharing.
- ``guest_placement``: place a guest job inside a host job's allocation (the cores the
  host holds on each of its nodes, less what other guests already use there).
- ``permit_step``: the Permit step for offer-based backends (Mesos, where resources come
  as offers and nothing supports gangs): a pending gang holds the offers it receives until
  the job's whole request can be placed, or until a timeout passes, and then says which
  offers to accept and which to decline. Like the coscheduling plugin's Permit in the
  Kubernetes scheduler framework: all members placed together, or none after the timeout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..model import Allocation, InvalidInput, Job, check_finite, validate_job_id

_new, _setattr = object.__new__, object.__setattr__

# ``free`` arguments are ordered (node, free cores) pairs or a mapping (insertion order).
FreeCores = Sequence[tuple[str, int]] | Mapping[str, int]


def _pairs(free: FreeCores) -> Iterable[tuple[str, int]]:
    if type(free) is dict:  # the hot path: skip the ABC check
        return free.items()
    return free.items() if isinstance(free, Mapping) else free


def first_fit(job: Job, free: FreeCores) -> Allocation | None:
    """The first nodes, in the given order, that hold the job's per-node parts; or None.

    A job of c cores on k nodes needs ``extra = c mod k`` nodes with ``base + 1`` free
    cores and the rest with ``base = c // k``. Walking the nodes once, a node with room for
    the larger part fills a large slot while one is open, else a small one; a node with
    room only for ``base`` fills a small slot. This finds a placement whenever one exists
    and uses the earliest nodes it can. The allocation lists nodes in the given order.
    """
    k = job.nodes
    base, extra = divmod(job.cores, k)
    small_slots = k - extra
    big_taken = small_taken = 0
    chosen: list[tuple[str, int]] = []
    for node, cores in _pairs(free):
        if cores < base:  # base >= 1: a job has at least one core per node
            continue
        if big_taken < extra and cores >= base + 1:
            chosen.append((node, base + 1))
            big_taken += 1
        elif small_taken < small_slots:
            chosen.append((node, base))
            small_taken += 1
        else:
            continue
        if big_taken + small_taken == k:
            return Allocation(job.job_id, tuple(chosen))
    return None


def guest_placement(guest: Job, host_allocation: Allocation,
                    used_by_guests: Mapping[str, int] | None = None) -> Allocation | None:
    """Where a guest job runs inside a host's allocation: first fit over the host's cores
    per node (less ``used_by_guests``, the cores other guests of this host already take).
    Guests of one host do not share cores with each other, only with the host."""
    used = used_by_guests or {}
    held = host_allocation.cores_by_node
    if len(held) == 1 and guest.nodes == 1:
        # One node each (the common case): first_fit's answer without building the list.
        node, cores = held[0]
        if cores - used.get(node, 0) >= guest.cores:
            # (Allocation(...), which has no checks, with its fields set at once)
            a = _new(Allocation)
            _setattr(a, "__dict__", {"job_id": guest.job_id,
                                     "cores_by_node": ((node, guest.cores),)})
            return a
        return None
    room = [(node, cores - used.get(node, 0)) for node, cores in held]
    return first_fit(guest, room)


def fits_beside(guest: Job, host: Job, other_guests: Sequence[Job] = (), *,
                node_mem_mb: int | None = None, node_bb_gb: int | None = None) -> str | None:
    """Why ``guest`` cannot share its host's nodes for memory or burst buffer, or None.

    Requests are per node (``Job.mem_mb``, ``Job.bb_gb``; None counts as 0). A guest runs
    on nodes of its host, beside the host and possibly the host's other guests: on a node
    their requests must add up to at most the node's capacity. Every other guest counts,
    wherever it runs (a safe over-estimate when a host spans several nodes). A capacity of
    None is not checked.
    """
    for name, cap, unit in (("mem_mb", node_mem_mb, "MB of memory"),
                            ("bb_gb", node_bb_gb, "GB of burst buffer")):
        if cap is None:
            continue
        want = getattr(guest, name) or 0
        if not want:
            continue
        held = (getattr(host, name) or 0) + sum(getattr(g, name) or 0 for g in other_guests)
        if held + want > cap:
            return (f"guest {guest.job_id} needs {want} {unit} per node; host {host.job_id} "
                    f"and its guests hold {held} of the node's {cap}")
    return None


def subtract(free: dict[str, int], allocation: Allocation) -> None:
    """Take an allocation's cores out of a free-cores map (in place)."""
    for node, cores in allocation.cores_by_node:
        left = free.get(node, 0) - cores
        if left < 0:
            raise InvalidInput(
                f"allocation of job {allocation.job_id} takes {cores} cores on node {node}, "
                f"only {free.get(node, 0)} are free"
            )
        free[node] = left


# -- Permit for offer-based backends -------------------------------------------------------

@dataclass(frozen=True)
class Offer:
    """Resources a master offers: ``cores`` on ``node``, received at ``time``."""

    offer_id: str
    node: str
    cores: int
    time: float

    def __post_init__(self) -> None:
        validate_job_id(self.offer_id, "offer_id")
        validate_job_id(self.node, f"offer {self.offer_id}: node")
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 0:
            raise InvalidInput(f"offer {self.offer_id}: cores must be an integer >= 0, got {self.cores!r}")
        check_finite(self.time, f"offer {self.offer_id}: time", minimum=0.0)


@dataclass(frozen=True)
class PendingGang:
    """A job waiting for enough offers: the offers it holds and since when it waits."""

    job: Job
    since: float
    held: tuple[Offer, ...] = ()


@dataclass(frozen=True)
class PermitResult:
    """What to do after a permit step.

    ``status`` is ``"placed"`` (accept ``accept``, each offer id with the cores to use from
    it, launch the job on ``allocation``), ``"waiting"`` (keep ``gang``, holding its
    offers) or ``"timed_out"`` (the job goes back to the queue). ``decline`` lists the
    offers to give back now: on placement the held offers the job does not need, on
    timeout all of them.
    """

    status: str
    gang: PendingGang | None
    allocation: Allocation | None = None
    accept: tuple[tuple[str, int], ...] = ()
    decline: tuple[str, ...] = ()


def permit_step(gang: PendingGang, offers: Sequence[Offer], now: float,
                timeout_s: float) -> PermitResult:
    """Add newly received offers to a pending gang and decide: place, wait or give up.

    Offers on one node add up; nodes are tried in the order their first offer arrived.
    When the job fits (first fit), each node's cores come from its offers in arrival
    order; offers that contribute nothing are declined. When it does not fit and
    ``now - since >= timeout_s``, every held offer is declined, so resources a partial gang
    hoards never starve other frameworks for longer than the timeout.
    """
    check_finite(now, "permit step: now", minimum=0.0)
    to = check_finite(timeout_s, "permit step: timeout_s", minimum=0.0)
    held = gang.held + tuple(offers)
    seen = {o.offer_id for o in gang.held}
    for o in offers:
        if o.offer_id in seen:
            raise InvalidInput(f"offer {o.offer_id} was already received by job {gang.job.job_id}")
        seen.add(o.offer_id)
    by_node: dict[str, int] = {}
    for o in held:
        by_node[o.node] = by_node.get(o.node, 0) + o.cores
    alloc = first_fit(gang.job, by_node)
    if alloc is not None:
        need = alloc.as_dict()
        accept: list[tuple[str, int]] = []
        decline: list[str] = []
        for o in held:
            want = need.get(o.node, 0)
            if want > 0 and o.cores > 0:
                use = min(want, o.cores)
                accept.append((o.offer_id, use))
                need[o.node] = want - use
            else:
                decline.append(o.offer_id)
        return PermitResult("placed", None, alloc, tuple(accept), tuple(decline))
    if now - gang.since >= to:
        return PermitResult("timed_out", None, decline=tuple(o.offer_id for o in held))
    return PermitResult("waiting", PendingGang(gang.job, gang.since, held))


def rescind(gang: PendingGang, offer_id: str) -> PendingGang:
    """The master took an offer back: the gang no longer holds it."""
    return PendingGang(gang.job, gang.since, tuple(o for o in gang.held if o.offer_id != offer_id))


__all__ = [
    "FreeCores", "Offer", "PendingGang", "PermitResult", "first_fit", "guest_placement",
    "permit_step", "rescind", "subtract",
]
