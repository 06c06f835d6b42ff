"""The ASA_X learner (paper Algorithm 1), as a small object over plain data.

Per job class it keeps expert weights alpha, the accumulated risk r of the current round,
and the round count t. ``decide`` mixes the experts' distributions with alpha, samples an
action and remembers the decision as pending; ``observe`` takes the host's loss when it
arrives (late: when the host ends, or earlier when Hp shows it cannot finish in time),
adds p_i(x)[j] * loss to every expert's risk, and once max_i r_i exceeds the threshold
closes the round:

    alpha_i <- alpha_i * exp(-gamma_t * r_i) / N_t,   r <- 0,   t <- t + 1.

It also keeps, per class, what Theorem 1 talks about: the mixture's and each expert's
cumulative risk over closed rounds and sum gamma_s^2, so the excess risk and its bound can
be checked on real runs (``excess_risk`` / ``theorem1_bound``).

A caveat found by our property tests: the paper's proof establishes the gamma-weighted
inequality (its eq. 11), sum_s gamma_s (m_s - e*_s) <= ln n + 0.5 sum_s gamma_s^2, and then
divides by gamma_t with Abel's inequality. That last step needs every partial weighted
excess to be >= 0, which a switching adversary breaks: with gamma_t = gamma0 / sqrt(t), E_t
can exceed (5) (seen: by 0.50 after 170 rounds, tests/test_learner_properties.py). With a
constant gamma (5) is (11) divided by gamma and always holds. So we keep the weighted sums
too (``weighted_excess_risk`` / ``weighted_bound``): eq. 11 holds for every schedule, and
the tests check it for every schedule and (5) for the constant one.

Classes are held up to ``LearnerConfig.max_classes``: a site whose job names carry a run
number would otherwise add a class (its experts included, about 3.4 KB) per job for as long
as the controller runs. Past the bound the class used least recently, with no decision
pending, is forgotten: it starts afresh if it comes back (a store keeps its last saved
state, which a restart reads again).

No I/O: the state store (coscheduler/store) saves ``ClassState`` and pending decisions.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Callable, Iterable, Sequence

from ..model import InvalidInput, check_finite, validate_job_class, validate_job_id
from .experts import (EXTRA_EXPERTS, Expert, HostState, action_fractions, extra_expert,
                      paper_experts)
from .fitted import FittedTreeExpert
from .keyed import keyed_answers

log = logging.getLogger(__name__)

GAMMA_SCHEDULES = ("sqrt", "constant")


@dataclass(frozen=True)
class LearnerConfig:
    """m actions, the learning-rate schedule gamma_t, the risk threshold and the seed.

    gamma_t = gamma0 / sqrt(t) ("sqrt", non-increasing as Theorem 1 needs) or gamma0
    ("constant"). The round closes once max_i r_i exceeds ``risk_threshold`` (1 in the paper).
    """

    m: int = 10
    gamma0: float = 1.0
    gamma_schedule: str = "sqrt"
    risk_threshold: float = 1.0
    seed: int = 0
    fitted_expert: bool = True
    # Optional experts beyond the paper's four (experts.EXTRA_EXPERTS: "pair", "io"). A
    # learner's expert set is fixed: saved classes with another set are refused.
    extra_experts: tuple[str, ...] = ()
    # Classes held at once (module docstring): 10,000 hold about 34 MB.
    max_classes: int = 10_000

    def __post_init__(self) -> None:
        action_fractions(self.m)
        if isinstance(self.max_classes, bool) or not isinstance(self.max_classes, int) \
                or self.max_classes < 1:
            raise InvalidInput(f"max_classes must be an integer >= 1, got {self.max_classes!r}")
        object.__setattr__(self, "extra_experts", tuple(self.extra_experts))
        for name in self.extra_experts:
            if name not in EXTRA_EXPERTS:
                raise InvalidInput(f"unknown expert {name!r}: the optional experts are "
                                   f"{', '.join(EXTRA_EXPERTS)}")
        if len(set(self.extra_experts)) != len(self.extra_experts):
            raise InvalidInput(f"extra experts repeat: {list(self.extra_experts)}")
        g = check_finite(self.gamma0, "gamma0")
        if g is None or g <= 0:
            raise InvalidInput(f"gamma0 must be > 0, got {self.gamma0!r}")
        if self.gamma_schedule not in GAMMA_SCHEDULES:
            raise InvalidInput(
                f"gamma_schedule must be one of {', '.join(GAMMA_SCHEDULES)}, got {self.gamma_schedule!r}"
            )
        t = check_finite(self.risk_threshold, "risk_threshold")
        if t is None or t <= 0:
            raise InvalidInput(f"risk_threshold must be > 0, got {self.risk_threshold!r}")

    def gamma(self, t: int) -> float:
        """gamma_t for round t = 1, 2, ..."""
        if self.gamma_schedule == "constant":
            return self.gamma0
        return self.gamma0 / math.sqrt(t)


@dataclass
class ClassState:
    """What the learner knows of one job class. Plain data, saved by the store."""

    job_class: str
    expert_names: tuple[str, ...]
    weights: list[float]
    risk: list[float]
    rounds: int = 0               # closed rounds t
    decisions: int = 0            # decisions made for hosts of this class
    observations: int = 0         # losses observed (all rounds)
    round_observations: int = 0   # losses observed in the open round
    last_update: float | None = None
    # Theorem 1 bookkeeping over closed rounds.
    cum_mixture_risk: float = 0.0
    cum_expert_risk: list[float] = field(default_factory=list)
    sum_gamma_sq: float = 0.0
    last_gamma: float | None = None
    # The same, each round weighted by its gamma_s (the paper's eq. 11).
    cum_weighted_mixture_risk: float = 0.0
    cum_weighted_expert_risk: list[float] = field(default_factory=list)

    @classmethod
    def fresh(cls, job_class: str, expert_names: Sequence[str]) -> "ClassState":
        n = len(expert_names)
        return cls(job_class=job_class, expert_names=tuple(expert_names), weights=[1.0 / n] * n,
                   risk=[0.0] * n, cum_expert_risk=[0.0] * n,
                   cum_weighted_expert_risk=[0.0] * n)

    def to_dict(self) -> dict:
        return {
            "job_class": self.job_class, "expert_names": list(self.expert_names),
            "weights": list(self.weights), "risk": list(self.risk), "rounds": self.rounds,
            "decisions": self.decisions, "observations": self.observations,
            "round_observations": self.round_observations, "last_update": self.last_update,
            "cum_mixture_risk": self.cum_mixture_risk, "cum_expert_risk": list(self.cum_expert_risk),
            "sum_gamma_sq": self.sum_gamma_sq, "last_gamma": self.last_gamma,
            "cum_weighted_mixture_risk": self.cum_weighted_mixture_risk,
            "cum_weighted_expert_risk": list(self.cum_weighted_expert_risk),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ClassState":
        try:
            names = tuple(d["expert_names"])
            n = len(names)
            st = cls(
                job_class=validate_job_class(d["job_class"]), expert_names=names,
                weights=[float(w) for w in d["weights"]], risk=[float(r) for r in d["risk"]],
                rounds=int(d["rounds"]), decisions=int(d["decisions"]),
                observations=int(d["observations"]), round_observations=int(d["round_observations"]),
                last_update=d.get("last_update"), cum_mixture_risk=float(d["cum_mixture_risk"]),
                cum_expert_risk=[float(r) for r in d["cum_expert_risk"]],
                sum_gamma_sq=float(d["sum_gamma_sq"]), last_gamma=d.get("last_gamma"),
                # Absent in states saved before they were kept: start them at zero.
                cum_weighted_mixture_risk=float(d.get("cum_weighted_mixture_risk", 0.0)),
                cum_weighted_expert_risk=[float(r) for r in d.get("cum_weighted_expert_risk",
                                                                  [0.0] * n)],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"class state record is not valid ({exc}): {d!r}") from None
        if not (len(st.weights) == len(st.risk) == len(st.cum_expert_risk)
                == len(st.cum_weighted_expert_risk) == n) or n == 0:
            raise InvalidInput(f"class state for {st.job_class!r}: lengths of weights/risk/experts differ")
        if any(not math.isfinite(w) or w < 0 for w in st.weights) or abs(sum(st.weights) - 1) > 1e-6:
            raise InvalidInput(f"class state for {st.job_class!r}: weights {st.weights} are not a distribution")
        return st


@dataclass(frozen=True)
class Decision:
    """One co-allocation decision: host A's state, each expert's p_i(x), the action taken."""

    decision_id: int
    time: float
    job_class: str
    host_job: str
    guest_job: str
    state: HostState
    expert_names: tuple[str, ...]
    expert_dists: tuple[tuple[float, ...], ...]
    weights: tuple[float, ...]
    mixture: tuple[float, ...]
    action_index: int
    action_fraction: float
    policy: str = "asax"

    def to_dict(self) -> dict:
        return {
            "decision_id": self.decision_id, "time": self.time, "job_class": self.job_class,
            "host_job": self.host_job, "guest_job": self.guest_job, "state": self.state.to_dict(),
            "expert_names": list(self.expert_names),
            "expert_dists": [list(p) for p in self.expert_dists], "weights": list(self.weights),
            "mixture": list(self.mixture), "action_index": self.action_index,
            "action_fraction": self.action_fraction, "policy": self.policy,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Decision":
        try:
            return cls(
                decision_id=int(d["decision_id"]), time=float(d["time"]), job_class=d["job_class"],
                host_job=d["host_job"], guest_job=d["guest_job"],
                state=HostState.from_dict(d["state"]), expert_names=tuple(d["expert_names"]),
                expert_dists=tuple(tuple(float(x) for x in p) for p in d["expert_dists"]),
                weights=tuple(float(w) for w in d["weights"]),
                mixture=tuple(float(x) for x in d["mixture"]),
                action_index=int(d["action_index"]), action_fraction=float(d["action_fraction"]),
                policy=d.get("policy", "asax"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"decision record is not valid ({exc})") from None


@dataclass(frozen=True)
class RoundClosed:
    """The weight update that closed round t of a class (what the history shows)."""

    job_class: str
    round: int
    time: float
    gamma: float
    risk: tuple[float, ...]
    weights_before: tuple[float, ...]
    weights_after: tuple[float, ...]


_new = object.__new__
_setattr = object.__setattr__
_MIXTURES_MAX = 8192   # cached mixtures (see AsaxLearner._mix); cleared past this


def _uniform01(seed: int, decision_id: int) -> float:
    """A uniform draw in [0, 1) from (seed, decision id): splitmix64.

    Keyed by decision id instead of a stream position, so the sequence of actions is the
    same after a restart from the store as in one uninterrupted run.
    """
    z = (seed * 0x9E3779B97F4A7C15 + decision_id * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def default_expert_factory(config: LearnerConfig) -> Callable[[], list[Expert]]:
    """The paper's four trees and the optional extra experts (shared: they hold no state)
    plus, if enabled, a fitted expert per class (it learns from that class's outcomes only)."""
    trees = paper_experts(config.m) + [extra_expert(n, config.m) for n in config.extra_experts]

    def make() -> list[Expert]:
        experts: list[Expert] = list(trees)
        if config.fitted_expert:
            experts.append(FittedTreeExpert(config.m, seed=config.seed))
        return experts

    return make


class AsaxLearner:
    """Algorithm 1 with weights per job class. Deterministic for a given seed."""

    def __init__(self, config: LearnerConfig | None = None,
                 expert_factory: Callable[[], list[Expert]] | None = None,
                 classes: Iterable[ClassState] = (), pending: Iterable[Decision] = (),
                 next_decision_id: int = 1):
        self.config = config or LearnerConfig()
        self.actions = action_fractions(self.config.m)
        self._factory = expert_factory or default_expert_factory(self.config)
        self._experts: dict[str, list[Expert]] = {}
        self._classes: dict[str, ClassState] = {}
        # Per class, the experts' keyed answers in one call (``_keyed_experts``);
        # (class, keys) -> (weights, distributions, mixture, its sum, running sums), ``_mix``.
        self._keyed: dict[str, Callable | bool] = {}
        self._valid: set[str] = set()     # class names that passed validate_job_class
        self._mixtures: dict[tuple, tuple] = {}
        # classes by last use, oldest first, and the pending decisions of each (a class
        # with one pending is never forgotten: its outcome must reach its own state)
        self._recency: OrderedDict[str, None] = OrderedDict()
        self._pending_of: dict[str, int] = {}
        self.forgotten_classes = 0
        self.pending: dict[int, Decision] = {}
        self.next_decision_id = next_decision_id
        names = self.expert_names
        for st in classes:
            if tuple(st.expert_names) != names:
                raise InvalidInput(
                    f"saved state of class {st.job_class!r} has experts {list(st.expert_names)}, "
                    f"this learner has {list(names)}: refusing to mix them"
                )
            self._classes[st.job_class] = st
        for d in pending:
            self.pending[d.decision_id] = d
            self._pending_of[d.job_class] = self._pending_of.get(d.job_class, 0) + 1
            self.next_decision_id = max(self.next_decision_id, d.decision_id + 1)
        # a saved state larger than the bound: the classes updated last are kept
        for c in sorted(self._classes, key=lambda c: self._classes[c].last_update or 0.0):
            self._recency[c] = None
        self._forget_beyond_bound()

    # -- experts and classes ---------------------------------------------------------------
    @property
    def expert_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self._factory_probe())

    def _factory_probe(self) -> list[Expert]:
        if not hasattr(self, "_probe"):
            self._probe = self._factory()
            for e in self._probe:
                if len(e.distribution(_PROBE_STATE)) != self.config.m:
                    raise InvalidInput(f"expert {e.name} does not give {self.config.m} probabilities")
        return self._probe

    def prepare(self) -> None:
        """What the experts load slowly, loaded now (a fitted expert's library): a process
        that will decide for long calls it at its start, so that no pass waits for it."""
        for e in self._factory_probe():
            prepare = getattr(e, "prepare", None)
            if prepare is not None:
                prepare()

    def experts_for(self, job_class: str) -> list[Expert]:
        experts = self._experts.get(job_class)
        if experts is None:
            experts = self._experts[job_class] = self._factory()
        return experts

    def class_state(self, job_class: str) -> ClassState:
        """The class's state (created uniform on first sight, which may forget the class
        used least recently: module docstring)."""
        st = self._classes.get(job_class)
        if st is not None and job_class in self._valid:
            self._recency.move_to_end(job_class)
            return st
        validate_job_class(job_class)
        self._valid.add(job_class)
        if st is None:
            st = self._classes[job_class] = ClassState.fresh(job_class, self.expert_names)
        self._recency[job_class] = None
        self._recency.move_to_end(job_class)
        self._forget_beyond_bound()
        return st

    def holds(self, job_class: str) -> bool:
        """Whether the class is held now (not unknown, not forgotten)."""
        return job_class in self._classes

    def _forget_beyond_bound(self) -> None:
        """Forget classes used least recently, with no decision pending, down to the bound.
        The newest class is never forgotten; when every other held class has a decision
        pending the bound is passed until one is observed."""
        excess = len(self._classes) - self.config.max_classes
        if excess <= 0:
            return
        newest = next(reversed(self._recency))
        victims = []
        for c in self._recency:     # oldest first; most often the first one goes
            if len(victims) == excess:
                break
            if c != newest and self._pending_of.get(c, 0) == 0:
                victims.append(c)
        before = self.forgotten_classes
        for c in victims:
            del self._classes[c], self._recency[c]
            self._experts.pop(c, None)
            self._keyed.pop(c, None)
            self._valid.discard(c)
        self.forgotten_classes += len(victims)
        if self.forgotten_classes.bit_length() > before.bit_length():   # (1, 2, 4, 8, ... so far)
            log.warning("learner: %d job classes forgotten so far (at most %d are held; the "
                        "least recently used go first). Many one-job classes usually mean "
                        "job names with run numbers: give such jobs a class "
                        "(docs/slurm.md)", self.forgotten_classes, self.config.max_classes)

    def known_classes(self) -> list[str]:
        return sorted(self._classes)

    def weights(self, job_class: str) -> dict[str, float]:
        if job_class not in self._classes:
            raise InvalidInput(f"unknown job class {job_class!r}: no decision was made for it")
        st = self._classes[job_class]
        return dict(zip(st.expert_names, st.weights))

    # -- Algorithm 1 -----------------------------------------------------------------------
    def decide(self, state: HostState, host_job: str, guest_job: str, now: float,
               job_class: str | None = None) -> Decision:
        """Lines 4-8: mix the experts' p_i(x) with alpha, sample action j, record it."""
        job_class = job_class or state.job_class
        validate_job_id(host_job, "host_job")
        validate_job_id(guest_job, "guest_job")
        if type(now) is not float or not 0.0 <= now < math.inf:
            check_finite(now, "decision time", minimum=0.0)
        st = self.class_state(job_class)
        weights = tuple(st.weights)
        dists, mixture, total, cumulative = self._mix(job_class, state, weights)
        did = self.next_decision_id
        self.next_decision_id += 1
        # The first action whose running sum of the mixture exceeds u (the last if none).
        j = bisect_right(cumulative, _uniform01(self.config.seed, did) * total)
        if j >= self.config.m:
            j = self.config.m - 1
        # The fields are this method's own checked values: set at once, not one by one
        # through the frozen dataclass's __init__ (one decision per host asked).
        decision = _new(Decision)
        _setattr(decision, "__dict__", {
            "decision_id": did, "time": float(now), "job_class": job_class,
            "host_job": host_job, "guest_job": guest_job, "state": state,
            "expert_names": st.expert_names, "expert_dists": dists, "weights": weights,
            "mixture": mixture, "action_index": j, "action_fraction": self.actions[j],
            "policy": "asax"})
        st.decisions += 1
        self.pending[did] = decision
        pending_of = self._pending_of
        pending_of[job_class] = pending_of.get(job_class, 0) + 1
        return decision

    def _settled(self, job_class: str) -> None:
        left = self._pending_of.pop(job_class, 0) - 1
        if left > 0:
            self._pending_of[job_class] = left

    def _keyed_experts(self, job_class: str):
        """The class's experts' keyed answers in one call (``experts.keyed_answers``), or
        False when some expert has no ``keyed_distribution``."""
        fn = keyed_answers(self.experts_for(job_class)) or False
        self._keyed[job_class] = fn
        return fn

    def _mix(self, job_class: str, state: HostState, weights: tuple[float, ...]
             ) -> tuple[tuple, tuple[float, ...], float, list[float]]:
        """The experts' distributions for ``state``, their mixture under ``weights``, its
        sum and its running sums. Experts that key their answers (``keyed_distribution``:
        the paper's trees by leaf, the fitted one by fit and leaves) let the mixture be
        computed once per class, weights and combination of leaves, not once per (host,
        guest) pair."""
        fns = self._keyed.get(job_class)
        if fns is None:
            fns = self._keyed_experts(job_class)
        if fns:
            keys, dist_list = fns(state)
            key = (job_class, keys)
            hit = self._mixtures.get(key)
            if hit is not None and hit[0] == weights:
                return hit[1], hit[2], hit[3], hit[4]
            dists = tuple(dist_list)
        else:
            dists = tuple(e.distribution(state) for e in self.experts_for(job_class))
        m = self.config.m
        mixture = [0.0] * m
        for alpha, p in zip(weights, dists):
            for j in range(m):
                mixture[j] += alpha * p[j]
        mixture_t = tuple(mixture)
        total = sum(mixture)
        cumulative = list(accumulate(mixture))
        if fns:
            if len(self._mixtures) >= _MIXTURES_MAX:
                self._mixtures.clear()
            self._mixtures[key] = (weights, dists, mixture_t, total, cumulative)
        return dists, mixture_t, total, cumulative

    def observe(self, decision_id: int, loss: float, now: float) -> RoundClosed | None:
        """Lines 9-12: the host's loss for a decision arrives; update risk, maybe weights."""
        decision = self.pending.get(decision_id)
        if decision is None:
            raise InvalidInput(f"unknown or already observed decision id {decision_id!r}")
        lv = check_finite(loss, f"loss of decision {decision_id}", minimum=0.0, maximum=1.0)
        check_finite(now, "observation time", minimum=0.0)
        assert lv is not None
        del self.pending[decision_id]
        self._settled(decision.job_class)
        st = self.class_state(decision.job_class)
        j = decision.action_index
        for i, p in enumerate(decision.expert_dists):
            st.risk[i] += p[j] * lv
        st.observations += 1
        st.round_observations += 1
        for e in self.experts_for(decision.job_class):
            e.learn(decision.state, decision.action_fraction, lv)
        if max(st.risk) > self.config.risk_threshold:
            return self._close_round(st, now)
        return None

    def end_round(self, job_class: str, now: float) -> RoundClosed | None:
        """A host of ``job_class`` whose co-allocations were all observed has ended: close
        the class's round (Algorithm 1 line 12) if it observed any loss since the last
        close. Each host job's co-allocations are one pass of the inner loop; the paper's
        round ends once its losses are in, or earlier when max_i r_i exceeds the threshold
        (``observe``). Without this, rounds close only on that threshold, which losses
        that small (lending only idle CPU) may take many runs to reach."""
        st = self._classes.get(job_class)
        if st is None or st.round_observations == 0:
            return None
        return self._close_round(st, now)

    def teach(self, decision: Decision, loss: float) -> None:
        """Replay a recorded outcome into the experts only (no risk, no weights): how a
        restarted learner's fitted experts regain what they had learned."""
        for e in self.experts_for(decision.job_class):
            e.learn(decision.state, decision.action_fraction, float(loss))

    def recall_window(self) -> int | None:
        """How many of a class's most recent observed outcomes ``recall`` needs (the
        largest ``recall_window`` of its experts); None: every one (an expert cannot say)."""
        windows = [getattr(e, "recall_window", None) for e in self._factory_probe()]
        if any(w is None or not callable(getattr(e, "recall", None))
               for w, e in zip(windows, self._factory_probe())):
            return None
        return max(windows, default=0)

    def recall(self, job_class: str, outcomes: Sequence[tuple[Decision, float]],
               seen: int) -> None:
        """A restart: the class's experts become what ``seen`` observed outcomes made of
        them, given the last of those (at least ``recall_window()``, or all of them), oldest
        first. Risk and weights are the class state's, saved apart."""
        told = [(d.state, d.action_fraction, float(loss)) for d, loss in outcomes]
        for e in self.experts_for(job_class):
            if self.recall_window() is None:
                for state, a, loss in told:
                    e.learn(state, a, loss)
                continue
            try:
                e.recall(told[len(told) - min(len(told), e.recall_window):], seen)
            except InvalidInput as exc:
                # Fewer rows kept than it needs (a prune kept too few): it relearns from them.
                log.warning("class %s: %s; expert %s relearns from the %d outcomes kept",
                            job_class, exc, e.name, len(told))
                e.recall(told, len(told))

    def forget(self, decision_id: int) -> Decision | None:
        """Drop a pending decision that was never carried out (the guest did not start)."""
        decision = self.pending.pop(decision_id, None)
        if decision is not None:
            self._settled(decision.job_class)
        return decision

    def _close_round(self, st: ClassState, now: float) -> RoundClosed:
        t = st.rounds + 1
        gamma = self.config.gamma(t)
        before = tuple(st.weights)
        mixture_risk = sum(a * r for a, r in zip(st.weights, st.risk))
        st.cum_mixture_risk += mixture_risk
        st.cum_weighted_mixture_risk += gamma * mixture_risk
        for i, r in enumerate(st.risk):
            st.cum_expert_risk[i] += r
            st.cum_weighted_expert_risk[i] += gamma * r
        st.sum_gamma_sq += gamma * gamma
        # Work in log space relative to the smallest risk so no weight underflows to 0.
        rmin = min(st.risk)
        raw = [a * math.exp(-gamma * (r - rmin)) for a, r in zip(st.weights, st.risk)]
        norm = sum(raw)
        st.weights = [x / norm for x in raw]
        closed = RoundClosed(st.job_class, t, float(now), gamma, tuple(st.risk), before,
                             tuple(st.weights))
        st.risk = [0.0] * len(st.risk)
        st.round_observations = 0
        st.rounds = t
        st.last_update = float(now)
        st.last_gamma = gamma
        return closed

    # -- Theorem 1 -------------------------------------------------------------------------
    def excess_risk(self, job_class: str) -> float:
        """E_t over the closed rounds: the mixture's risk minus the best expert's."""
        st = self._classes[job_class]
        return st.cum_mixture_risk - min(st.cum_expert_risk)

    def theorem1_bound(self, job_class: str) -> float:
        """(ln n + 0.5 * sum_s gamma_s^2) / gamma_t after t closed rounds."""
        st = self._classes[job_class]
        if st.rounds == 0:
            return math.inf
        n = len(st.weights)
        return (math.log(n) + 0.5 * st.sum_gamma_sq) / st.last_gamma

    def weighted_excess_risk(self, job_class: str) -> float:
        """sum_s gamma_s (m_s - e*_s), * the expert with the least weighted risk."""
        st = self._classes[job_class]
        return st.cum_weighted_mixture_risk - min(st.cum_weighted_expert_risk)

    def weighted_bound(self, job_class: str) -> float:
        """ln n + 0.5 * sum_s gamma_s^2: what the paper's eq. 11 bounds the weighted excess by."""
        st = self._classes[job_class]
        return math.log(len(st.weights)) + 0.5 * st.sum_gamma_sq

    def snapshot(self) -> list[ClassState]:
        """Copies of every class state (for saving)."""
        return [replace(st, weights=list(st.weights), risk=list(st.risk),
                        cum_expert_risk=list(st.cum_expert_risk)) for st in self._classes.values()]


_PROBE_STATE = HostState(job_class="probe", cpu_percent=50.0, mem_percent=50.0,
                         stage_type="parallel", elapsed_fraction=0.5, happiness=1.0)
