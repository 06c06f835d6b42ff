"""Stage 4, place, inside running jobs: which hosts the co-allocation policy is asked about.

- ``HostIndex``: the candidate hosts of one pass, indexed by spare room so that finding a
  guest's candidates costs O(log n) per candidate, not a walk over every running job
  (``maxtree.MaxTree`` behind it; ``hoststate.host_state``: what the experts see of a host).
- ``why_not_hosted``: which rule kept a guest from every host (an operator's diagnostic,
  also what ``cosched simulate paper`` counts to show where co-allocation loses chances).
"""

from __future__ import annotations

import math
from itertools import islice
from operator import itemgetter
from typing import Callable, Iterator, Mapping, Sequence

from ..model import Job, MetricsSample, RunningJob
from ..policies.coalloc import HostCandidate, candidate
from ..policies.gang import fits_beside, guest_placement
from ..policies.lending import guest_need, least_paying_speed, loan
from .config import ControllerConfig
from .hoststate import OwnState, host_own_state, host_state, wait_share
from .maxtree import MaxTree
from .usage import ClassUsage

_NEG = -math.inf
_BOTH_MIN_HOSTS = 48   # rooms with fewer hosts are walked rather than given a both-rules tree
_first = itemgetter(0)


class HostIndex:
    """Candidate hosts for one pass, by spare room (cores not used by guests), in first-fit
    order (first node of the allocation, then job id).

    A host is a running job that is lendable, is not a guest (nor was one, ``was_guest``,
    unless ``config.former_guests_host``) and holds fewer than ``config.max_guests_per_host``
    guests (no limit when None). ``candidates(guest)`` merges, in that order, the hosts of
    every room >= the guest's cores, skipping hosts already asked this pass, hosts in
    cooldown for this guest, hosts the guest's node layout does not fit, hosts beside which
    the guest's memory or burst buffer would not fit (``fits_beside``) and, under an EASY
    reservation, hosts that would leave the guest holding their cores past the shadow time;
    it yields ``HostCandidate``s lazily, at most ``config.max_candidates_per_guest`` (all
    when None).

    Hosts have fixed positions (their first-fit rank); each room keeps max trees over those
    positions of its hosts' estimated ends and (idle-only lending) idle cores, so every skip
    costs O(log n), not a walk. A host that takes a guest moves to the room it has left.

    ``cooldown`` ((guest, host) -> until) is read as candidates are asked for, so declines
    added to it during the pass count at once.
    """

    def __init__(self, running: list[RunningJob], capacity: Mapping[str, int],
                 samples: Mapping[str, MetricsSample], now: float, *,
                 running_by_id: Mapping[str, RunningJob], was_guest: set[str],
                 cooldown: Mapping[tuple[str, str], float], config: ControllerConfig,
                 usage: ClassUsage | None = None, idle_only: bool = False,
                 alone_runtime: Callable[[str], float | None] | None = None):
        self.samples = samples
        # Lend only idle CPU (policies.lending): hosts without enough idle share for a
        # guest are not handed over.
        self.idle_only = idle_only
        self.by_class = config.lend_unsampled_by_class and usage is not None
        self.margin = config.lend_margin
        self.min_share = config.lend_min_share
        # The "sooner" rule: a partial loan must beat waiting (policies.lending). ``wait_of``
        # (set by the controller): when a guest could start on cores of its own, estimated.
        self.sooner = idle_only and config.lend_rule == "sooner"
        self.wait_of: Callable[[Job], float] | None = None
        self._alone_of = alone_runtime
        self._alone: dict[str, float | None] = {}
        self._own: dict[str, OwnState] = {}    # host -> its own part of its state, this pass
        self.usage = usage
        self.now = now
        self.cooldown = cooldown
        self.node_mem_mb, self.node_bb_gb = config.node_mem_mb, config.node_bb_gb
        self.running_by_id = running_by_id
        self.max_candidates = config.max_candidates_per_guest
        node_rank = {n: i for i, n in enumerate(capacity)}
        max_guests = config.max_guests_per_host
        no_former = not config.former_guests_host
        found: list[tuple[tuple, RunningJob, dict[str, int] | None, float, int]] = []
        unranked = len(node_rank)
        for rj in running:
            if rj.host_job is not None or not rj.lendable:
                continue
            job_id = rj.job.job_id
            if no_former and job_id in was_guest:
                continue
            guests = rj.guest_jobs
            if max_guests is not None and len(guests) >= max_guests:
                continue
            held = rj.allocation.cores_by_node
            used: dict[str, int] | None = None    # (made only for hosts that have guests)
            lent = 0.0
            if guests:
                used = {}
                for g in guests:
                    grj = running_by_id.get(g)
                    if grj is None:
                        continue
                    lent += grj.quota_fraction * grj.job.cores
                    for node, c in grj.allocation.cores_by_node:
                        used[node] = used.get(node, 0) + c
                room = rj.allocation.cores - sum(used.values())
            else:   # (most hosts: its cores are its room)
                room = held[0][1] if len(held) == 1 else rj.allocation.cores
            if room < 1:
                continue
            first = held[0][0] if held else ""
            found.append(((node_rank.get(first, unranked), job_id), rj, used, lent, room))
        found.sort(key=lambda e: e[0])
        n = len(found)
        # Per position: the entry (rank, host, cores its guests use per node or None, what
        # it lent at the start of the pass, its room then), its estimated end, its room now
        # (0: out of the index).
        self.entries = found
        self.where = {e[0][1]: p for p, e in enumerate(found)}
        self.ends = [e[1].start_time + e[1].job.walltime_s for e in found]
        self.room_of = [e[4] for e in found]
        self.max_room = max(self.room_of, default=0)
        # Idle-only lending: each host's idle cores (its quota minus its measured use minus
        # the margin; -1e308 unmeasured), kept up to date as it lends in this pass.
        self.idle = None
        if idle_only:
            # Per position: the cores the host uses (None: unmeasured) and keeps as margin.
            self._busy = [self._busy_cores(e[1]) for e in found]
            self._keep = [self.margin * e[1].job.cores for e in found]
            self.idle = [-1e308 if b is None else e[1].job.cores - e[3] - b - k
                         for e, b, k in zip(found, self._busy, self._keep)]
        self._n = n
        self.end_trees: dict[int, MaxTree] = {}
        self.idle_trees: dict[int, MaxTree] = {}
        self._count: dict[int, int] = {}      # hosts per room
        for r in self.room_of:
            self._count[r] = self._count.get(r, 0) + 1
        for room in sorted(set(self.room_of)):
            ends = [t if r == room else _NEG for t, r in zip(self.ends, self.room_of)]
            self.end_trees[room] = MaxTree(ends)
            if idle_only:
                self.idle_trees[room] = MaxTree([x if r == room else _NEG
                                                 for x, r in zip(self.idle, self.room_of)])
        # Under an EASY reservation: per (room, least end) a max tree of the idle cores of
        # the hosts that end late enough (built on first use, at most 8 per room).
        self._both: dict[tuple[int, float], MaxTree] = {}
        self._both_keys: dict[int, list[float]] = {}
        self._both_in: dict[int, list[tuple[float, MaxTree]]] = {}   # room -> its both trees
        # Per pass: each kind of guest's part (``_kind``) and each room's next-host
        # function per (room, least end, least idle cores) that reads a tree (``_room_next``).
        self._kinds: dict[tuple, tuple] = {}
        self._fns: dict[tuple, Callable[[int], int]] = {}
        self.asked: set[str] = set()
        self.max_guests = max_guests
        # Guests given to a host during this pass: (count, core-equivalents lent). Its
        # ``used`` map is updated in place, so its remaining cores are known at once.
        self.taken: dict[str, tuple[int, float]] = {}
        self._used = {e[0][1]: e[2] for e in found if e[2] is not None}

    # -- hosts entering and leaving rooms -------------------------------------------------------
    def _enter(self, p: int, room: int) -> None:
        self.room_of[p] = room     # (rooms only shrink: max_room still bounds them)
        self._count[room] = self._count.get(room, 0) + 1
        end = self.ends[p]
        tree = self.end_trees.get(room)
        if tree is None:
            tree = self.end_trees[room] = MaxTree.empty(self._n)
        tree.set(p, end)
        if self.idle is not None:
            idle = self.idle[p]
            tree = self.idle_trees.get(room)
            if tree is None:
                tree = self.idle_trees[room] = MaxTree.empty(self._n)
            tree.set(p, idle)
            for least, both in self._both_in.get(room, ()):
                both.set(p, idle if end >= least else _NEG)

    def _leave_at(self, p: int) -> None:
        room = self.room_of[p]
        if not room:
            return
        self.room_of[p] = 0
        self._count[room] -= 1
        self.end_trees[room].set(p, _NEG)
        if self.idle is not None:
            self.idle_trees[room].set(p, _NEG)
            for _, both in self._both_in.get(room, ()):
                both.set(p, _NEG)

    def took(self, host_id: str, placement, lent: float) -> None:
        """A guest was placed on ``placement`` inside ``host_id`` this pass, lending ``lent``
        core-equivalents: the host stays a candidate for other guests on its other cores
        (its state is its own, unchanged by the guest), with what it lends now, in the room
        it has left (so guests that no longer fit it do not walk past it)."""
        p = self.where.get(host_id)
        if p is None or host_id in self.asked:
            self.mark_asked([host_id])
            return
        used = self._used.get(host_id)
        if used is None:
            used = self._used[host_id] = {}
        for node, c in placement.cores_by_node:
            used[node] = used.get(node, 0) + c
        n, extra = self.taken.get(host_id, (0, 0.0))
        now_lent = extra + lent
        self.taken[host_id] = (n + 1, now_lent)
        self._leave_at(p)
        _, rj, _, base, _ = self.entries[p]
        room = rj.allocation.cores - sum(used.values())
        full = self.max_guests is not None and len(rj.guest_jobs) + n + 1 >= self.max_guests
        if self.idle is not None:
            busy = self._busy[p]
            if busy is None:
                full = True   # unmeasured: never lends (-1e308 idle cores)
            else:
                cores, keep = rj.job.cores, self._keep[p]
                if cores - (base + extra + lent) - busy - keep < 0.5:
                    full = True   # its idle CPU is lent: no other guest could get a useful share
                # (summed as the candidates' own lent is: what it lent before, plus this pass's)
                self.idle[p] = cores - (base + now_lent) - busy - keep
        if room >= 1 and not full:
            self._enter(p, room)

    def _busy_cores(self, rj: RunningJob) -> float | None:
        """The cores a host uses by its latest sample (at most its own); not sampled yet,
        what its class usually uses (``config.lend_unsampled_by_class``); None: unknown."""
        job = rj.job
        sample = self.samples.get(job.job_id)
        if sample is not None and math.isfinite(sample.cpu_percent):
            pct = sample.cpu_percent
        elif sample is None and self.by_class:
            expected = self.usage.expected(job.job_class)
            if expected is None:
                return None
            pct = expected.cpu_percent
        else:
            return None
        cores = job.cores
        return min(cores, max(0.0, pct / 100.0 * cores))

    def mark_asked(self, host_ids) -> None:
        for h in host_ids:
            if h not in self.asked:
                p = self.where.get(h)
                if p is not None:
                    self._leave_at(p)
                self.asked.add(h)

    # -- finding candidates ---------------------------------------------------------------------
    def _room_next(self, room: int, min_end: float, min_idle: float | None
                   ) -> Callable[[int], int]:
        """f(i): the first position >= i of the room's hosts that end at or after
        ``min_end`` and (idle-only lending) have at least ``min_idle`` idle cores; -1: none.
        Kept for the pass (``_fns``) unless it walks: a room that grows may get a tree."""
        key = (room, min_end, min_idle)
        tree = self.end_trees[room]
        if min_idle is None or self.idle is None:
            f = self._fns[key] = lambda i: tree.first_at_least(i, min_end)
            return f
        idle = self.idle_trees[room]
        if min_end <= -1e308:   # no reservation to respect: idle CPU enough is all
            f = self._fns[key] = lambda i: idle.first_at_least(i, min_idle)
            return f
        # Under a reservation a host must also end late enough. Guests' walltimes take few
        # distinct values, so per (room, least end) a max tree of the idle cores of the hosts
        # that end late enough answers both rules in O(log n) (at most 8 per room, and only
        # for rooms of many hosts); else walk the end tree and check idle CPU inline.
        both = self._both.get((room, min_end))
        if both is None and self._count[room] >= _BOTH_MIN_HOSTS \
                and len(self._both_keys.get(room, ())) < 8:
            size = tree.size
            ends, idles = tree.tree[size:size + self._n], idle.tree[size:size + self._n]
            both = MaxTree([x if t >= min_end else _NEG for x, t in zip(idles, ends)])
            self._both[(room, min_end)] = both
            self._both_keys.setdefault(room, []).append(min_end)
            self._both_in.setdefault(room, []).append((min_end, both))
        if both is not None:
            f = self._fns[key] = lambda i: both.first_at_least(i, min_idle)
            return f
        leaves, size = idle.tree, idle.size

        def walk(i: int) -> int:
            i = tree.first_at_least(i, min_end)
            while i != -1 and not leaves[size + i] >= min_idle:
                i = tree.first_at_least(i + 1, min_end)
            return i
        return walk

    @staticmethod
    def _positions(nexts: list[Callable[[int], int]]) -> Iterator[int]:
        """The positions the rooms' ``nexts`` give, merged in order (a host is in one room)."""
        if len(nexts) == 1:
            f = nexts[0]
            i = f(0)
            while i != -1:
                yield i
                i = f(i + 1)
            return
        heads = [[i, f] for f in nexts if (i := f(0)) != -1]
        while heads:
            head = min(heads, key=_first)
            i = head[0]
            yield i
            head[0] = head[1](i + 1)
            if head[0] == -1:
                heads.remove(head)

    def candidates(self, guest: Job, shadow: float | None) -> Iterator[HostCandidate]:
        if self.max_room < guest.cores:
            return iter(())
        guest_end = self.now + guest.walltime_s
        # Under a reservation a guest that outlives its host past the shadow time could hold
        # reserved cores: only hosts that end after the guest qualify then.
        # (-1e308, not -inf: empty positions hold -inf and must never match.)
        min_end = guest_end if shadow is not None and guest_end > shadow else -1e308
        kind = self._kinds.get((guest.job_class, guest.cores, guest.stage_type))
        if kind is None:
            kind = self._kind(guest)
        min_idle = kind[1]
        idle_trees, fns = self.idle_trees, self._fns
        nexts = []
        for room, tree in self.end_trees.items():
            if room >= guest.cores and tree.tree[1] >= min_end \
                    and (min_idle is None or idle_trees[room].tree[1] >= min_idle):
                nexts.append(fns.get((room, min_end, min_idle))
                             or self._room_next(room, min_end, min_idle))
        if not nexts:
            return iter(())
        found = self._filter(guest, self._positions(nexts), kind)
        return found if self.max_candidates is None else islice(found, self.max_candidates)

    def _kind(self, guest: Job) -> tuple:
        """What the candidates of a guest depend on besides its walltime, the same for every
        guest of its class, cores and stage type in a pass: what its class usually uses
        (``expected``), its least idle cores (idle-only lending, else None), its usual
        demand in cores and its need as a share of its cores (for ``loan``), and what the
        experts may know of it (``HostState.with_guest``'s values but its share of the host)."""
        expected = self.usage.expected(guest.job_class) if self.usage is not None else None
        min_idle = demand = need = None
        if self.idle_only:
            demand = None if expected is None else expected.cpu_percent / 100.0 * guest.cores
            need_cores = guest_need(guest.cores, demand, self.margin)
            min_idle = self.min_share * need_cores - 1e-9
            need = need_cores / guest.cores
        known = None
        if expected is not None:
            known = (expected.cpu_percent, expected.mem_percent, expected.io_mb_s,
                     wait_share(guest.stage_type, guest.cores, expected.cpu_percent))
        kind = (expected, min_idle, demand, need, known)
        self._kinds[(guest.job_class, guest.cores, guest.stage_type)] = kind
        return kind

    def _filter(self, guest: Job, positions: Iterator[int], kind: tuple
                ) -> Iterator[HostCandidate]:
        """HostCandidates at ``positions`` for a guest of ``kind`` (``_kind``)."""
        now, cooldown, taken_map, samples = self.now, self.cooldown, self.taken, self.samples
        entries, own_of, used_of = self.entries, self._own, self._used
        gid, g_cores = guest.job_id, guest.cores
        check_beside = self.node_mem_mb is not None or self.node_bb_gb is not None
        idle_only, margin, max_guests = self.idle_only, self.margin, self.max_guests
        min_share = self.min_share
        _, _, demand, need, known = kind
        sooner = self.sooner and self.wait_of is not None
        busy = self._busy if idle_only else None
        wait_s: float | None = None     # (estimated once per guest, when first needed)
        for p in positions:
            _, rj, _, lent, _ = entries[p]
            host = rj.job
            host_id = host.job_id
            used = used_of.get(host_id)
            if cooldown:
                until = cooldown.get((gid, host_id))
                if until is not None and until > now:
                    continue
            taken = taken_map.get(host_id)
            if taken is not None:
                if max_guests is not None and len(rj.guest_jobs) + taken[0] >= max_guests:
                    continue
                lent += taken[1]
            placement = guest_placement(guest, rj.allocation, used)
            if placement is None:
                continue
            if check_beside and fits_beside(
                    guest, host, [self.running_by_id[g].job for g in rj.guest_jobs
                                  if g in self.running_by_id],
                    node_mem_mb=self.node_mem_mb, node_bb_gb=self.node_bb_gb) is not None:
                continue  # its memory or burst buffer would not fit beside the host's
            sample = samples.get(host_id)
            cap = None
            if idle_only:
                cap = loan(host.cores, lent, busy[p], g_cores, demand, margin,
                           min_share=min_share)
                if cap is None:
                    continue   # not enough idle CPU on this host for this guest
            min_loan = None if need is None else min_share * need
            if sooner and cap < need - 1e-9:
                if wait_s is None:
                    wait_s = self.wait_of(guest) - now
                pays = least_paying_speed(guest.walltime_s, self.ends[p] - now, wait_s)
                if cap < pays * need - 1e-9:
                    continue   # waiting for cores of its own is estimated to end it sooner
                min_loan = max(min_loan, pays * need)
            own = own_of.get(host_id)
            if own is None:
                own = own_of[host_id] = host_own_state(
                    rj, sample, now, self.alone_runtime(host.job_class),
                    self.usage.expected(host.job_class)
                    if sample is None and self.by_class else None)
            state = own if known is None else own.with_guest(
                known[0], known[1], g_cores / host.cores, known[2], known[3])
            yield candidate(rj, placement, lent, sample, state, cap, need, min_loan)

    def has_idle(self, guest: Job, rj: RunningJob) -> bool:
        """Whether ``rj`` has idle CPU enough for the smallest loan to ``guest`` (diagnostics)."""
        expected = self.usage.expected(guest.job_class) if self.usage is not None else None
        demand = None if expected is None else expected.cpu_percent / 100.0 * guest.cores
        used = self._busy_cores(rj)
        lent = sum(self.running_by_id[g].quota_fraction * self.running_by_id[g].job.cores
                   for g in rj.guest_jobs if g in self.running_by_id)
        lent += self.taken.get(rj.job_id, (0, 0.0))[1]
        return loan(rj.job.cores, lent, used, guest.cores, demand, self.margin,
                    min_share=self.min_share) is not None

    def alone_runtime(self, job_class: str) -> float | None:
        """The class's runtime alone (cached for the pass), or None."""
        if self._alone_of is None:
            return None
        if job_class not in self._alone:
            try:
                self._alone[job_class] = self._alone_of(job_class)
            except Exception:  # noqa: BLE001 - a store error: Hp falls back to the walltime
                self._alone[job_class] = None
        return self._alone[job_class]


# The rules a host candidate passes, in the order the index applies them; a guest that finds
# no host is refused by the furthest rule any host reached (relaxing that rule alone is what
# would have given it a candidate first).
REFUSALS: tuple[str, ...] = (
    "no host large enough",   # no running job holds as many cores as the guest asks
    "hosts are guests",       # the large-enough jobs are guests (never nested) or not lendable
    "former guests",          # ... or were guests once (their host ended)
    "guest slots full",       # ... or already hold config.max_guests_per_host guests
    "no room left",           # ... or their cores are taken by other guests
    "EASY reservation",       # ... or end before the guest would, past the shadow time
    "cooldown",               # ... or declined this guest within decline_cooldown_s
    "asked this pass",        # ... or were asked for another guest in this pass
    "no idle CPU",            # ... or leave too little idle CPU for the smallest loan
    "declined",               # the policy was asked and did not co-allocate
)


def seconds_by_refusal(passes: Sequence[tuple[float, Mapping[str, str]]]) -> dict[str, float]:
    """Job-seconds of waiting per refusal rule: ``passes`` are (pass time,
    ``PassReport.refused``) in order; each refused job counts the time until the next
    pass (the last pass counts nothing: its wait is not known yet)."""
    out: dict[str, float] = {}
    for (t, refused), (t_next, _) in zip(passes, passes[1:]):
        for reason in refused.values():
            out[reason] = out.get(reason, 0.0) + (t_next - t)
    return out


def why_not_hosted(guest: Job, running: list[RunningJob], *,
                   running_by_id: Mapping[str, RunningJob], was_guest: set[str],
                   cooldown: Mapping[tuple[str, str], float], index: "HostIndex",
                   shadow: float | None, now: float, config: ControllerConfig) -> str:
    """The rule (one of ``REFUSALS``) that kept ``guest`` from every running host this pass,
    when the policy was never asked about it; ``index`` is this pass's ``HostIndex`` (what
    it handed out and who it asked). O(running): for diagnostics only."""
    guest_end = now + guest.walltime_s
    furthest = 0
    for rj in running:
        if rj.job.cores < guest.cores:
            continue
        stage = 1
        if rj.host_job is None and rj.lendable:
            stage = 2
            if config.former_guests_host or rj.job_id not in was_guest:
                stage = 3
                guests = len(rj.guest_jobs) + index.taken.get(rj.job_id, (0, 0.0))[0]
                if config.max_guests_per_host is None or guests < config.max_guests_per_host:
                    stage = 4
                    used = index._used.get(rj.job_id)
                    if used is None:
                        used = {}
                        for g in rj.guest_jobs:
                            grj = running_by_id.get(g)
                            if grj is not None:
                                for node, c in grj.allocation.cores_by_node:
                                    used[node] = used.get(node, 0) + c
                    if guest_placement(guest, rj.allocation, used) is not None:
                        stage = 5
                        if shadow is None or guest_end <= shadow or \
                                rj.start_time + rj.job.walltime_s >= guest_end:
                            stage = 6
                            until = cooldown.get((guest.job_id, rj.job_id))
                            if until is None or until <= now:
                                stage = 7
                                if rj.job_id not in index.asked:
                                    stage = 8
                                    if not index.idle_only or index.has_idle(guest, rj):
                                        stage = 9
        furthest = max(furthest, stage)
        if furthest == 9:
            break
    return REFUSALS[furthest]


__all__ = ["REFUSALS", "HostIndex", "MaxTree", "host_state", "seconds_by_refusal",
           "why_not_hosted"]
