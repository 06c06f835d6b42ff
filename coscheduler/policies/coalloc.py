"""Co-allocation policies: should a queued guest job share a running host job's cores, and
with which CPU quota? Pure logic over plain data, the same on every backend.

- ``SpaceSharing``: never co-allocates (today's Slurm: exclusive cores, backfilling).
- ``Static``: the first candidate host gets the guest at a fixed fraction (the paper's
  Static setting: every co-located pair gets 50 %).
- ``Asax``: the ASA_X learner picks a fraction a_j per host; a_0 = 0 % means "not on this
  host": that decision is observed at once with loss 0 and the next candidate is asked.

Quota arithmetic. A guest B placed on ``B.cores`` of host A's ``A.cores`` with fraction
a: on the shared cores A keeps (1 - a) and B gets a, so

    A's quota fraction (over its whole allocation) = 1 - a * B.cores / A.cores
    B's quota fraction (of its own cores)          = a

and with several guests A gives up ``sum_k a_k * B_k.cores``. When a guest ends, its share
goes back to A; when A ends first, its guests get 1.0 on their cores.

The controller builds the candidates (hosts in first-fit order, filtered by the
one-ask-per-pass rule, the decline cooldown and the cap on tries) and hands them over
lazily; a policy takes candidates from the iterator only as far as it needs, so building a
host's state costs nothing for hosts never asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Callable, Iterable, Iterator, Protocol

from ..learner import AsaxLearner, Decision, HostState
from ..learner.classes import job_class_of
from ..model import Allocation, InvalidInput, Job, MetricsSample, RunningJob, check_finite


def host_quota_fraction(host_cores: int, lent_core_share: float) -> float:
    """A host's quota fraction over its whole allocation after lending
    ``lent_core_share = sum_k a_k * guest_k.cores`` core-equivalents to its guests."""
    if host_cores < 1:
        raise InvalidInput(f"host cores must be >= 1, got {host_cores!r}")
    q = 1.0 - lent_core_share / host_cores
    if q <= 0.0 or q > 1.0 + 1e-12:
        raise InvalidInput(
            f"lending {lent_core_share} core-equivalents of {host_cores} cores leaves the host "
            f"a quota fraction of {q}: it must stay in (0, 1]"
        )
    return min(1.0, q)


def lent_share(fraction: float, guest_cores: int) -> float:
    """Core-equivalents a guest of ``guest_cores`` cores takes at quota ``fraction``."""
    return fraction * guest_cores


@dataclass(frozen=True)
class HostCandidate:
    """A running job that could host the guest: where the guest would run inside it, what
    it already lends, its latest metrics sample (None if unknown) and its state for the
    experts (built lazily by the controller; see ``state``)."""

    host: RunningJob
    placement: Allocation
    lent: float                      # core-equivalents already lent to other guests
    sample: MetricsSample | None
    state: HostState
    # With the idle-only lending rule (policies.lending): the largest quota fraction the
    # guest may get from this host (its idle share, capped by the guest's usual demand)
    # and the guest's need as a fraction of its cores; the smallest loan worth making, as
    # a fraction of its cores (``ControllerConfig.lend_min_share`` of its need). None: the
    # rule is off.
    loan_cap: float | None = None
    guest_need: float | None = None
    min_loan: float | None = None


_new = object.__new__
_setattr = object.__setattr__


def candidate(host: RunningJob, placement: Allocation, lent: float, sample: MetricsSample | None,
              state: HostState, loan_cap: float | None = None,
              guest_need: float | None = None, min_loan: float | None = None) -> HostCandidate:
    """``HostCandidate(...)`` with its fields set at once rather than one by one through
    the frozen dataclass's __init__ (the controller makes one per host it hands over)."""
    c = _new(HostCandidate)
    _setattr(c, "__dict__", {"host": host, "placement": placement, "lent": lent,
                             "sample": sample, "state": state, "loan_cap": loan_cap,
                             "guest_need": guest_need, "min_loan": min_loan})
    return c


@dataclass(frozen=True)
class Choice:
    """Co-allocate: run the guest on ``placement`` inside ``host_job`` at
    ``guest_quota``; the host's quota becomes ``host_quota``."""

    host_job: str
    placement: Allocation
    guest_quota: float
    host_quota: float
    decision: Decision | None = None


@dataclass(frozen=True)
class CoallocationResult:
    """What a policy answers for one guest: a ``choice`` (None: do not co-allocate now),
    the hosts it asked (each asked at most once per pass), and the decisions that declined
    (ASA_X's a_0, already observed with loss 0) for the controller to record."""

    choice: Choice | None
    asked: tuple[str, ...] = ()
    declined: tuple[Decision, ...] = ()


NO_COALLOCATION = CoallocationResult(None)


class CoallocationPolicy(Protocol):
    """Decides where (if anywhere) a queued guest shares a host's cores."""

    name: str
    # False: the controller never builds candidates (space sharing).
    co_allocates: bool
    # The learner whose decisions the controller must feed back (None: nothing learns).
    learner: AsaxLearner | None

    def choose(self, guest: Job, candidates: Iterable[HostCandidate], now: float) -> CoallocationResult:
        ...


def _choice(guest: Job, cand: HostCandidate, a: float, decision: Decision | None) -> Choice:
    if cand.loan_cap is not None:
        a = min(a, cand.loan_cap)
    host = cand.host.job
    host_q = host_quota_fraction(host.cores, cand.lent + lent_share(a, guest.cores))
    # (Choice(...) with its fields set at once: one per guest placed in a host)
    c = _new(Choice)
    _setattr(c, "__dict__", {"host_job": host.job_id, "placement": cand.placement,
                             "guest_quota": a, "host_quota": host_q, "decision": decision})
    return c


def _result(choice: Choice | None, asked: tuple[str, ...],
            declined: tuple[Decision, ...]) -> CoallocationResult:
    """``CoallocationResult(...)`` with its fields set at once (one per guest and pass)."""
    r = _new(CoallocationResult)
    _setattr(r, "__dict__", {"choice": choice, "asked": asked, "declined": declined})
    return r


class SpaceSharing:
    """Never co-allocates: jobs run only on free cores (with backfilling)."""

    name = "space-sharing"
    co_allocates = False
    learner = None
    idle_only = False

    def choose(self, guest: Job, candidates: Iterable[HostCandidate], now: float) -> CoallocationResult:
        return NO_COALLOCATION


class Static:
    """The first candidate host gets the guest at a fixed fraction (default 50 %)."""

    co_allocates = True
    learner = None
    # The paper's Static lends half whatever the host uses.
    idle_only = False

    def __init__(self, fraction: float = 0.5):
        f = check_finite(fraction, "static quota fraction")
        if f is None or not 0.0 < f < 1.0:
            raise InvalidInput(f"static quota fraction must lie in (0, 1), got {fraction!r}")
        self.fraction = f
        self.name = f"static-{round(f * 100):g}"

    def choose(self, guest: Job, candidates: Iterable[HostCandidate], now: float) -> CoallocationResult:
        for cand in candidates:
            return CoallocationResult(_choice(guest, cand, self.fraction, None), (cand.host.job_id,))
        return NO_COALLOCATION


class Asax:
    """ASA_X: the learner samples a fraction per host; a_0 declines and the next host is asked.

    Each ask is a decision of the learner (pending until the host's loss arrives). A
    decline is observed at once with loss 0: lending nothing cannot hurt the host, and
    the experts that put probability on a_0 for that state bear no risk for it.
    """

    name = "asax"
    co_allocates = True

    def __init__(self, learner: AsaxLearner, class_of: Callable[[Job], str] | None = None,
                 idle_only: bool = True, max_asks: int | None = 3,
                 permit: Callable[[HostState, float], bool] | None = None,
                 short_actions: str = "forget"):
        self.learner = learner
        # An action under the smallest loan (policies.lending): "forget" makes no loan and
        # forgets the decision; "floor" lends the smallest loan instead (the learner's
        # cautious actions then lend that little, and their hosts' losses are observed).
        if short_actions not in SHORT_ACTIONS:
            raise InvalidInput(f"ASA_X short_actions must be one of {', '.join(SHORT_ACTIONS)}, "
                               f"got {short_actions!r}")
        self.short_actions = short_actions
        # The Permit step (after the learner chose a lending, before it is carried out):
        # False vetoes the loan, which is then not made and teaches nothing.
        self.permit = permit
        # Hosts asked per guest and pass: a few, not every host until one says yes (with
        # enough asks some sampled action lends, whatever the learner has learned).
        # None: no limit.
        if max_asks is not None and (isinstance(max_asks, bool) or not isinstance(max_asks, int)
                                     or max_asks < 1):
            raise InvalidInput(f"ASA_X max_asks must be an integer >= 1 or None, got {max_asks!r}")
        self.max_asks = max_asks
        # Lend only the host's measured idle share (policies.lending); the controller hands
        # over only hosts with enough of it, and revises the loans every tick.
        self.idle_only = idle_only
        # The learner keeps weights per class; which jobs share a class is a choice
        # (``coscheduler.learner.classes``): by default the host's own job class.
        self.class_of = class_of or job_class_of

    def choose(self, guest: Job, candidates: Iterable[HostCandidate], now: float) -> CoallocationResult:
        asked: list[str] = []
        declined: list[Decision] = []
        # (islice: the candidate after the last ask is never built.)
        it: Iterator[HostCandidate] = iter(candidates) if self.max_asks is None \
            else islice(candidates, self.max_asks)
        for cand in it:
            host = cand.host.job
            host_id = host.job_id
            asked.append(host_id)
            d = self.learner.decide(cand.state, host_id, guest.job_id, now,
                                    job_class=self.class_of(host))
            a = d.action_fraction
            short = cand.min_loan is not None and a < cand.min_loan - 1e-12
            if short and self.short_actions == "floor" and d.action_index != 0 and a > 0.0:
                a, short = cand.min_loan, False   # (the cap is at least the floor)
            if d.action_index == 0 or d.action_fraction <= 0.0:
                # a_0: observed now, loss 0 adds no risk (lending nothing cannot hurt the host).
                self.learner.observe(d.decision_id, 0.0, now)
                declined.append(d)
                continue
            if not short and self.permit is not None:
                short = not self.permit(cand.state, a if cand.loan_cap is None
                                        else min(a, cand.loan_cap))
            if short:
                # An action under the smallest loan: no loan is made. It was not carried
                # out, so nothing is learned from it (no loss to observe); it counts as a decline.
                self.learner.forget(d.decision_id)
                declined.append(d)
                continue
            return _result(_choice(guest, cand, a, d), tuple(asked), tuple(declined))
        return _result(None, tuple(asked), tuple(declined))


POLICY_NAMES = ("space-sharing", "static", "asax")
SHORT_ACTIONS = ("forget", "floor")


def make_policy(name: str, learner: AsaxLearner | None = None,
                static_fraction: float = 0.5,
                class_of: Callable[[Job], str] | None = None,
                idle_only: bool = True,
                permit: Callable[[HostState, float], bool] | None = None,
                short_actions: str = "forget") -> CoallocationPolicy:
    """A policy by name: ``space-sharing`` (alias ``slurm``), ``static``, ``asax``
    (``class_of``: the learner's class of a host job, default its job class;
    ``idle_only``: ASA_X lends only the host's idle share; ``permit``: ASA_X's Permit step,
    policies.permit; ``short_actions``: what an action under the smallest loan does, ``Asax``)."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key in ("space-sharing", "spacesharing", "slurm"):
        return SpaceSharing()
    if key == "static":
        return Static(static_fraction)
    if key in ("asax", "asa_x"):
        return Asax(learner or AsaxLearner(), class_of, idle_only, permit=permit,
                    short_actions=short_actions)
    raise InvalidInput(f"unknown co-allocation policy {name!r}: use one of {', '.join(POLICY_NAMES)}")


__all__ = [
    "Asax", "Choice", "CoallocationPolicy", "CoallocationResult", "HostCandidate",
    "NO_COALLOCATION", "POLICY_NAMES", "SHORT_ACTIONS", "SpaceSharing", "Static", "candidate", "host_quota_fraction",
    "lent_share", "make_policy",
]
