"""Stage 4, place, inside running jobs: which hosts the co-allocation policy is asked about.

- ``host_state``: what the experts see of a host (its class, CPU %, memory %, stage type,
  elapsed share of walltime, happiness Hp).
- ``HostIndex``: the candidate hosts of one pass, indexed by spare room so that finding a
  guest's candidates costs O(log n) per candidate, not a walk over every running job.
- ``MaxTree``: the segment tree behind that index.
- ``why_not_hosted``: which rule kept a guest from every host (an operator's diagnostic,
  also what ``cosched simulate paper`` counts to show where co-allocation loses chances).
"""

from __future__ import annotations

import bisect
import heapq
import math
from itertools import islice
from typing import Callable, Iterator, Mapping

from .. import happiness as hp
from ..learner import HostState
from ..model import InvalidInput, Job, MetricsSample, RunningJob
from ..policies.coalloc import HostCandidate
from ..policies.gang import fits_beside, guest_placement
from ..policies.lending import guest_need, loan
from .config import ControllerConfig
from .usage import ClassUsage, Expected


def host_state(rj: RunningJob, sample: MetricsSample | None, now: float,
               guest: Job | None = None, expected: Expected | None = None,
               alone_runtime_s: float | None = None) -> HostState:
    """HostState of a host from its latest sample. Unknown metrics are read as a busy
    host (100 % CPU and memory, Hp None): with nothing known, lend little. With ``guest``
    and what its class usually uses (``expected``), the state also tells the guest's
    usual CPU, memory and file I/O and its cores over the host's. With the host class's
    runtime alone, Hp measures its speed against alone (``happiness.happiness_vs_alone``)."""
    job = rj.job
    elapsed = max(0.0, now - rj.start_time)
    happiness = None
    cpu = mem = 100.0
    io = None
    guest_fields = {}
    if guest is not None and expected is not None:
        guest_fields = dict(guest_cpu_percent=expected.cpu_percent,
                            guest_mem_percent=expected.mem_percent,
                            guest_share=guest.cores / job.cores,
                            guest_io_mb_s=expected.io_mb_s)
    if sample is not None:
        io = sample.io_mb_s
        cpu, mem = sample.cpu_percent, sample.mem_percent
        total = sample.tasks_total if sample.tasks_total is not None else job.tasks
        try:
            if alone_runtime_s is not None and alone_runtime_s > 0:
                happiness = hp.happiness_vs_alone(elapsed, job.walltime_s, alone_runtime_s,
                                                  sample.tasks_done, total, sample.tasks_per_s)
            else:
                happiness = hp.happiness(elapsed, job.walltime_s, sample.tasks_done, total,
                                         sample.tasks_per_s)
        except InvalidInput:
            happiness = None
    return HostState(job.job_class, cpu, mem, job.stage_type, elapsed / job.walltime_s,
                     happiness, io_mb_s=io, **guest_fields)


class MaxTree:
    """A max segment tree over a fixed list of values: the first index >= i whose value is
    >= x in O(log n), and removal (value -> -inf). Lets the host index skip hosts already
    asked, and hosts that end too early to take a guest past an EASY reservation, without
    walking them one by one for every guest."""

    __slots__ = ("size", "tree")

    def __init__(self, values: list[float]):
        size = 1
        while size < max(1, len(values)):
            size *= 2
        tree = [-math.inf] * (2 * size)
        tree[size:size + len(values)] = values
        for k in range(size - 1, 0, -1):
            tree[k] = max(tree[2 * k], tree[2 * k + 1])
        self.size, self.tree = size, tree

    def remove(self, i: int) -> None:
        tree = self.tree
        k = i + self.size
        tree[k] = -math.inf
        k //= 2
        while k:
            tree[k] = max(tree[2 * k], tree[2 * k + 1])
            k //= 2

    def first_at_least(self, i: int, x: float) -> int:
        """Smallest index >= i with value >= x, or -1."""
        tree, size = self.tree, self.size
        if i >= size or tree[1] < x:
            return -1
        k = i + size
        if tree[k] >= x:
            return i
        # Climb until a right sibling holds a value >= x, then descend to its leftmost such leaf.
        while True:
            if k & 1 == 0 and tree[k + 1] >= x:
                k += 1
                break
            k //= 2
            if k <= 1:
                return -1
        while k < size:
            k = 2 * k if tree[2 * k] >= x else 2 * k + 1
        return k - size


class HostIndex:
    """Candidate hosts for one pass, bucketed by spare room (cores not used by guests) and
    ranked in first-fit order (first node of the allocation, then job id).

    A host is a running job that is lendable, is not a guest (nor was one, ``was_guest``,
    unless ``config.former_guests_host``) and holds fewer than ``config.max_guests_per_host``
    guests (no limit when None). ``candidates(guest)`` merges the
    buckets with room >= guest cores in rank order, skipping hosts already asked this pass,
    hosts in cooldown for this guest, hosts the guest's node layout does not fit, hosts
    beside which the guest's memory or burst buffer would not fit (``fits_beside``) and, under
    an EASY reservation, hosts that would leave the guest holding their cores past the
    shadow time; it yields ``HostCandidate``s lazily, at most
    ``config.max_candidates_per_guest`` (all when None). Each bucket keeps a max tree of its hosts'
    estimated ends, so both skips cost O(log n), not a walk.

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
        self.margin = config.lend_margin
        self._alone_of = alone_runtime
        self._alone: dict[str, float | None] = {}
        self.usage = usage
        self.now = now
        self.cooldown = cooldown
        self.node_mem_mb, self.node_bb_gb = config.node_mem_mb, config.node_bb_gb
        self.running_by_id = running_by_id
        self.max_candidates = config.max_candidates_per_guest
        node_rank = {n: i for i, n in enumerate(capacity)}
        max_guests = config.max_guests_per_host
        no_former = not config.former_guests_host
        buckets: dict[int, list[tuple[tuple, RunningJob, dict[str, int], float]]] = {}
        for rj in running:
            if rj.host_job is not None or not rj.lendable or (no_former and rj.job_id in was_guest):
                continue
            if max_guests is not None and len(rj.guest_jobs) >= max_guests:
                continue
            used: dict[str, int] = {}
            lent = 0.0
            for g in rj.guest_jobs:
                grj = running_by_id.get(g)
                if grj is None:
                    continue
                lent += grj.quota_fraction * grj.job.cores
                for node, c in grj.allocation.cores_by_node:
                    used[node] = used.get(node, 0) + c
            room = rj.allocation.cores - sum(used.values())
            if room < 1:
                continue
            first = rj.allocation.cores_by_node[0][0] if rj.allocation.cores_by_node else ""
            rank = (node_rank.get(first, len(node_rank)), rj.job_id)
            buckets.setdefault(room, []).append((rank, rj, used, lent))
        self.rooms = sorted(buckets)
        self.buckets = [sorted(buckets[r], key=lambda e: e[0]) for r in self.rooms]
        self.trees = [MaxTree([e[1].start_time + e[1].job.walltime_s for e in b])
                      for b in self.buckets]
        # Idle-only lending: per bucket, a max tree of each host's idle cores (its quota
        # minus its measured use minus the margin; -inf unmeasured), so hosts with too little
        # idle CPU for a guest are skipped in O(log n), not walked.
        self.idle_trees = [MaxTree([self._idle_cores(e[1], e[3]) for e in b])
                           for b in self.buckets] if idle_only else None
        self._both: dict[tuple[int, float], MaxTree] = {}
        self._both_keys: dict[int, list[float]] = {}
        self.where = {e[1].job_id: (b, i) for b, entries in enumerate(self.buckets)
                      for i, e in enumerate(entries)}
        self.asked: set[str] = set()
        self.max_guests = max_guests
        # Guests given to a host during this pass: (count, core-equivalents lent). Its
        # ``used`` map is updated in place, so its remaining cores are known at once.
        self.taken: dict[str, tuple[int, float]] = {}
        self._used = {e[1].job_id: e[2] for b in self.buckets for e in b}
        # Hosts that took a guest this pass, by the room they have left (rank order).
        self.moved: dict[int, list] = {}
        self._moved_room: dict[str, int] = {}

    def took(self, host_id: str, placement, lent: float) -> None:
        """A guest was placed on ``placement`` inside ``host_id`` this pass, lending ``lent``
        core-equivalents: the host stays a candidate for other guests on its other cores
        (its state is its own, unchanged by the guest), with what it lends now. It leaves
        its bucket (its room shrank) for a short list of hosts with less room, so guests
        that no longer fit it do not walk past it."""
        used = self._used.get(host_id)
        if used is None or host_id in self.asked:
            self.mark_asked([host_id])
            return
        for node, c in placement.cores_by_node:
            used[node] = used.get(node, 0) + c
        n, extra = self.taken.get(host_id, (0, 0.0))
        self.taken[host_id] = (n + 1, extra + lent)
        entry = self._leave(host_id)
        room = entry[1].allocation.cores - sum(used.values())
        full = self.max_guests is not None and len(entry[1].guest_jobs) + n + 1 >= self.max_guests
        if self.idle_only and self._idle_cores(entry[1], entry[3] + extra + lent) < 0.5:
            full = True   # its idle CPU is lent: no other guest could get a useful share
        if room >= 1 and not full:
            bisect.insort(self.moved.setdefault(room, []), entry, key=lambda e: e[0])
            self._moved_room[host_id] = room

    def _leave(self, host_id: str):
        """Take a host out of wherever the index holds it (its bucket or the moved lists);
        returns its entry."""
        room = self._moved_room.pop(host_id, None)
        if room is not None:
            lst = self.moved[room]
            i = next(k for k, e in enumerate(lst) if e[1].job_id == host_id)
            return lst.pop(i)
        b, i = self.where[host_id]
        self.trees[b].remove(i)
        if self.idle_trees is not None:
            self.idle_trees[b].remove(i)
            for e in self._both_keys.get(b, ()):
                self._both[(b, e)].remove(i)
        return self.buckets[b][i]

    def _idle_cores(self, rj: RunningJob, lent: float) -> float:
        sample = self.samples.get(rj.job_id)
        if sample is None or not math.isfinite(sample.cpu_percent):
            return -1e308
        used = min(rj.job.cores, max(0.0, sample.cpu_percent / 100.0 * rj.job.cores))
        return rj.job.cores - lent - used - self.margin * rj.job.cores

    def mark_asked(self, host_ids) -> None:
        for h in host_ids:
            if h not in self.asked:
                if h in self.where:
                    self._leave(h)
                self.asked.add(h)

    def _bucket_iter(self, b: int, min_end: float, min_idle: float | None = None):
        bucket, tree = self.buckets[b], self.trees[b]
        if min_idle is not None and self.idle_trees is not None:
            idle = self.idle_trees[b]
            if min_end <= -1e308:
                # No reservation to respect: walk the hosts with idle CPU enough.
                i = idle.first_at_least(0, min_idle)
                while i != -1:
                    yield bucket[i]
                    i = idle.first_at_least(i + 1, min_idle)
                return
            # Under a reservation a host must also end late enough. Guests' walltimes take
            # few distinct values, so per (bucket, least end) a max tree of the idle cores of
            # the hosts that end late enough answers both rules in O(log n); past a few
            # such trees per bucket, walk the end tree and check idle CPU inline.
            both = self._both.get((b, min_end))
            if both is None and len(self._both_keys.get(b, ())) < 8:
                size = tree.size
                both = MaxTree([idle.tree[size + k] if tree.tree[size + k] >= min_end
                                else -math.inf for k in range(len(bucket))])
                self._both[(b, min_end)] = both
                self._both_keys.setdefault(b, []).append(min_end)
            if both is not None:
                i = both.first_at_least(0, min_idle)
                while i != -1:
                    yield bucket[i]
                    i = both.first_at_least(i + 1, min_idle)
                return
            i = tree.first_at_least(0, min_end)
            while i != -1:
                if idle.tree[idle.size + i] >= min_idle:
                    yield bucket[i]
                i = tree.first_at_least(i + 1, min_end)
            return
        i = tree.first_at_least(0, min_end)
        while i != -1:
            yield bucket[i]
            i = tree.first_at_least(i + 1, min_end)

    def candidates(self, guest: Job, shadow: float | None) -> Iterator[HostCandidate]:
        if not self.rooms or self.rooms[-1] < guest.cores:
            return iter(())
        first = next(i for i, r in enumerate(self.rooms) if r >= guest.cores)
        guest_end = self.now + guest.walltime_s
        # Under a reservation a guest that outlives its host past the shadow time could hold
        # reserved cores: only hosts that end after the guest qualify then.
        # (-1e308, not -inf: removed hosts hold -inf and must never match.)
        min_end = guest_end if shadow is not None and guest_end > shadow else -1e308
        min_idle = None
        if self.idle_only:
            expected = self.usage.expected(guest.job_class) if self.usage is not None else None
            demand = None if expected is None else expected.cpu_percent / 100.0 * guest.cores
            min_idle = 0.5 * guest_need(guest.cores, demand, self.margin) - 1e-9
        iters = [self._bucket_iter(b, min_end, min_idle) for b in range(first, len(self.rooms))]
        for room, entries in self.moved.items():
            if room >= guest.cores and entries:
                iters.append(e for e in entries
                             if e[1].start_time + e[1].job.walltime_s >= min_end
                             and (min_idle is None or self._idle_cores(
                                 e[1], e[3] + self.taken.get(e[1].job_id, (0, 0.0))[1])
                                 >= min_idle))
        merged = iters[0] if len(iters) == 1 else heapq.merge(*iters, key=lambda e: e[0])
        found = self._filter(guest, merged)
        return found if self.max_candidates is None else islice(found, self.max_candidates)

    def _filter(self, guest: Job, entries) -> Iterator[HostCandidate]:
        now, cooldown = self.now, self.cooldown
        gid = guest.job_id
        expected = self.usage.expected(guest.job_class) if self.usage is not None else None
        for _, rj, used, lent in entries:
            host_id = rj.job.job_id
            until = cooldown.get((gid, host_id))
            if until is not None and until > now:
                continue
            taken = self.taken.get(host_id)
            if taken is not None:
                if self.max_guests is not None and \
                        len(rj.guest_jobs) + taken[0] >= self.max_guests:
                    continue
                lent += taken[1]
            placement = guest_placement(guest, rj.allocation, used)
            if placement is None:
                continue
            if (self.node_mem_mb is not None or self.node_bb_gb is not None) and fits_beside(
                    guest, rj.job, [self.running_by_id[g].job for g in rj.guest_jobs
                                    if g in self.running_by_id],
                    node_mem_mb=self.node_mem_mb, node_bb_gb=self.node_bb_gb) is not None:
                continue  # its memory or burst buffer would not fit beside the host's
            sample = self.samples.get(host_id)
            cap = need = None
            if self.idle_only:
                demand = None if expected is None else expected.cpu_percent / 100.0 * guest.cores
                used = None if sample is None else sample.cpu_percent / 100.0 * rj.job.cores
                cap = loan(rj.job.cores, lent, used, guest.cores, demand, self.margin)
                if cap is None:
                    continue   # not enough idle CPU on this host for this guest
                need = guest_need(guest.cores, demand, self.margin) / guest.cores
            yield HostCandidate(rj, placement, lent, sample,
                                host_state(rj, sample, now, guest, expected,
                                           self.alone_runtime(rj.job.job_class)),
                                loan_cap=cap, guest_need=need)

    def has_idle(self, guest: Job, rj: RunningJob) -> bool:
        """Whether ``rj`` has idle CPU enough for half of ``guest``'s need (diagnostics)."""
        expected = self.usage.expected(guest.job_class) if self.usage is not None else None
        demand = None if expected is None else expected.cpu_percent / 100.0 * guest.cores
        sample = self.samples.get(rj.job_id)
        used = None if sample is None else sample.cpu_percent / 100.0 * rj.job.cores
        lent = sum(self.running_by_id[g].quota_fraction * self.running_by_id[g].job.cores
                   for g in rj.guest_jobs if g in self.running_by_id)
        lent += self.taken.get(rj.job_id, (0, 0.0))[1]
        return loan(rj.job.cores, lent, used, guest.cores, demand, self.margin) is not None

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
    "no idle CPU",            # ... or leave too little idle CPU for half the guest's need
    "declined",               # the policy was asked and did not co-allocate
)


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
