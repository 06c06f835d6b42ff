"""ASA_X's experts: each maps a host job's state to a distribution over the m quota actions.

The paper's experts are decision trees, one per metric (CPU %, memory %, stage type,
elapsed share of walltime), each split by its metric and by happiness Hp into leaves that
hold a distribution (its Fig. 2 shows nine leaves: three metric bins x three Hp bins).
Design rule: more co-allocation when Hp >= 1 and the metric is low.

A leaf is described by one number, its *generosity* g in [0, 1]: the share of the largest
action it leans toward. Its distribution is a discretised bell around g * a_max with a small
floor, so every action keeps some probability (an expert that gives an action zero
probability could never be blamed for it).

``FittedTreeExpert`` (``fitted.py``) is the learned expert: a scikit-learn regression tree
fitted on the recorded (state, action, loss) outcomes of its job class. Until it has seen
enough outcomes it answers uniformly ("no opinion"), so the set of experts, and with it the
learner's guarantee, stays fixed from the first decision on.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Protocol, Sequence

from ..happiness import HAPPINESS_DONE
from ..model import InvalidInput, StageType, check_finite, validate_job_class

# Hp bins shared by every hand-made tree: < 1 (likely to overrun), [1, 1.1) (near 1),
# >= 1.1 (slack). Unknown Hp (no progress yet) falls in the cautious middle bin.
HP_EDGES = (1.0, 1.1)
HP_UNKNOWN_BIN = 1

LEAF_SPREAD = 0.15  # width of a leaf's bell over action fractions
LEAF_FLOOR = 0.01   # probability floor before normalisation


def action_fractions(m: int) -> tuple[float, ...]:
    """The m actions a_j = j / m, j = 0..m-1 (m = 10: 0 %, 10 %, ..., 90 %)."""
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise InvalidInput(f"number of actions m must be an integer >= 2, got {m!r}")
    return tuple(j / m for j in range(m))


@dataclass(frozen=True)
class HostState:
    """What the experts see of host job A when a guest could join it.

    ``cpu_percent`` and ``mem_percent`` are of A's allocation (0-100, may exceed 100
    briefly); ``elapsed_fraction`` is elapsed time over walltime; ``happiness`` is Hp(t) or
    None when unknown.

    Optional, beyond the paper's four metrics (None when unknown; the paper's experts never
    read them): ``io_mb_s``, the host's file I/O rate (MB/s read and written) as the node
    agent samples it; and what is known of the guest B that would join: ``guest_cpu_percent``,
    ``guest_mem_percent`` and ``guest_io_mb_s``, what jobs of B's class used of their own
    cores, memory and file I/O when they ran unthrottled, and ``guest_share``, B's cores
    over A's. ``wait_share`` and ``guest_wait_share``: the share of its time each job's
    processes wait off the CPU (0-1), which the controller derives from CPU use, cores and
    stage type (a sequential stage computes on one of its cores).
    """

    job_class: str
    cpu_percent: float
    mem_percent: float
    stage_type: StageType
    elapsed_fraction: float
    happiness: float | None = None
    io_mb_s: float | None = None
    guest_cpu_percent: float | None = None
    guest_mem_percent: float | None = None
    guest_share: float | None = None
    guest_io_mb_s: float | None = None
    wait_share: float | None = None
    guest_wait_share: float | None = None

    def __post_init__(self) -> None:
        if _plainly_valid(self):
            return   # the common case, checked in a few comparisons (one per decision)
        validate_job_class(self.job_class)
        check_finite(self.cpu_percent, "host state: cpu_percent", minimum=0.0)
        check_finite(self.mem_percent, "host state: mem_percent", minimum=0.0)
        check_finite(self.elapsed_fraction, "host state: elapsed_fraction", minimum=0.0)
        if self.happiness is not None:
            hp = float(self.happiness)
            if math.isnan(hp) or hp < 0:
                raise InvalidInput(f"host state: happiness must be >= 0 or None, got {self.happiness!r}")
        for name in _OPTIONAL_FIELDS:
            check_finite(getattr(self, name), f"host state: {name}", minimum=0.0, allow_none=True)
        for name in ("wait_share", "guest_wait_share"):
            v = getattr(self, name)
            if v is not None and v > 1.0:
                raise InvalidInput(f"host state: {name} must lie in [0, 1], got {v!r}")
        object.__setattr__(self, "stage_type", StageType.parse(self.stage_type, "host state"))

    @classmethod
    def of_host(cls, job_class: str, cpu_percent: float, mem_percent: float,
                stage_type: StageType, elapsed_fraction: float, happiness: float | None,
                io_mb_s: float | None, wait_share: float | None) -> "HostState":
        """A host's state without a guest, one per host asked about in a pass: plain values
        (``_plainly_valid``'s rules) are set at once, else through the constructor."""
        if type(stage_type) is StageType and job_class in _VALID_CLASSES \
                and type(cpu_percent) is type(mem_percent) is type(elapsed_fraction) is float \
                and 0.0 <= cpu_percent < _INF and 0.0 <= mem_percent < _INF \
                and 0.0 <= elapsed_fraction < _INF and _plain_guest(None, None, None, io_mb_s, wait_share) \
                and (happiness is None or (type(happiness) is float and happiness >= 0.0)):
            st = _new(cls)
            _setattr(st, "__dict__", {
                "job_class": job_class, "cpu_percent": cpu_percent, "mem_percent": mem_percent,
                "stage_type": stage_type, "elapsed_fraction": elapsed_fraction,
                "happiness": happiness, "io_mb_s": io_mb_s, "guest_cpu_percent": None,
                "guest_mem_percent": None, "guest_share": None, "guest_io_mb_s": None,
                "wait_share": wait_share, "guest_wait_share": None})
            return st
        return cls(job_class, cpu_percent, mem_percent, stage_type, elapsed_fraction,
                   happiness, io_mb_s, wait_share=wait_share)

    def with_guest(self, cpu_percent: float | None, mem_percent: float | None, share: float | None,
                   io_mb_s: float | None, wait_share: float | None) -> "HostState":
        """This (checked) state with what is known of a guest (its class's usual CPU %,
        memory %, I/O, waiting share; its cores over the host's), one per candidate: plain
        values are set at once, anything else goes through the constructor's checks."""
        if _plain_guest(cpu_percent, mem_percent, share, io_mb_s, wait_share):
            fields = self.__dict__.copy()
            fields["guest_cpu_percent"] = cpu_percent
            fields["guest_mem_percent"] = mem_percent
            fields["guest_share"] = share
            fields["guest_io_mb_s"] = io_mb_s
            fields["guest_wait_share"] = wait_share
            st = _new(HostState)
            _setattr(st, "__dict__", fields)
            return st
        return replace(self, guest_cpu_percent=cpu_percent, guest_mem_percent=mem_percent,
                       guest_share=share, guest_io_mb_s=io_mb_s, guest_wait_share=wait_share)

    def features(self) -> list[float]:
        """Numeric features for fitted experts (Hp clipped, unknowns as -1): what the
        host's own samples tell. Not the guest's fields: they come from the controller's
        memory of past runs, which a restart loses, and a restarted controller must decide
        as the uninterrupted one would."""
        hp = -1.0 if self.happiness is None else min(float(self.happiness), 10.0)
        return [
            float(self.cpu_percent),
            float(self.mem_percent),
            1.0 if self.stage_type is StageType.PARALLEL else 0.0,
            min(float(self.elapsed_fraction), 2.0),
            hp,
            -1.0 if self.io_mb_s is None else float(self.io_mb_s),
        ]

    def to_dict(self) -> dict:
        hp = self.happiness
        d = {
            "job_class": self.job_class,
            "cpu_percent": self.cpu_percent,
            "mem_percent": self.mem_percent,
            "stage_type": self.stage_type.value,
            "elapsed_fraction": self.elapsed_fraction,
            # JSON has no infinity: a finished-work host is "very happy".
            "happiness": None if hp is None else (HAPPINESS_DONE if math.isinf(hp) else hp),
        }
        for name in _OPTIONAL_FIELDS:
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "HostState":
        try:
            return cls(
                job_class=d["job_class"],
                cpu_percent=d["cpu_percent"],
                mem_percent=d["mem_percent"],
                stage_type=StageType(d["stage_type"]),
                elapsed_fraction=d["elapsed_fraction"],
                happiness=d.get("happiness"),
                io_mb_s=d.get("io_mb_s"),
                guest_cpu_percent=d.get("guest_cpu_percent"),
                guest_mem_percent=d.get("guest_mem_percent"),
                guest_share=d.get("guest_share"),
                guest_io_mb_s=d.get("guest_io_mb_s"),
                wait_share=d.get("wait_share"),
                guest_wait_share=d.get("guest_wait_share"),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise InvalidInput(f"host state record {d!r} is not valid: {exc}") from None


_INF = math.inf
_OPTIONAL_FIELDS = ("io_mb_s", "guest_cpu_percent", "guest_mem_percent", "guest_share",
                    "guest_io_mb_s", "wait_share", "guest_wait_share")
# Class names that passed validate_job_class (a pure check): a host state is built for every
# candidate host, and a cluster has few classes. Bounded: cleared when it grows past this.
_VALID_CLASSES: set[str] = set()
_VALID_CLASSES_MAX = 4096


_new, _setattr = object.__new__, object.__setattr__   # (fields set at once, all checked)


def _plain_guest(cpu: object, mem: object, share: object, io: object, wait: object) -> bool:
    """``HostState.with_guest``'s values pass ``__post_init__``'s checks as they are."""
    for v in (cpu, mem, share, io, wait):
        if v is not None and (type(v) is not float or not 0.0 <= v < _INF):
            return False
    return wait is None or wait <= 1.0


def _plainly_valid(st: "HostState") -> bool:
    """True when every field is of the plain type and in the range the full checks of
    ``HostState.__post_init__`` accept (floats finite and >= 0, Hp a float >= 0 or None, a
    StageType, a known-valid class); False sends it through those checks (which then
    raise the error or accept an int, a string stage type...)."""
    for v in (st.cpu_percent, st.mem_percent, st.elapsed_fraction):
        if type(v) is not float or not 0.0 <= v < _INF:
            return False
    hp = st.happiness
    if hp is not None and (type(hp) is not float or not hp >= 0.0):
        return False
    for name in _OPTIONAL_FIELDS:
        v = getattr(st, name)
        if v is not None and (type(v) is not float or not 0.0 <= v < _INF):
            return False
    for v in (st.wait_share, st.guest_wait_share):
        if v is not None and v > 1.0:
            return False
    if type(st.stage_type) is not StageType:
        return False
    c = st.job_class
    if c not in _VALID_CLASSES:
        validate_job_class(c)
        if len(_VALID_CLASSES) >= _VALID_CLASSES_MAX:
            _VALID_CLASSES.clear()
        _VALID_CLASSES.add(c)
    return True


class Expert(Protocol):
    """An expert maps a host state to a distribution over the learner's m actions."""

    name: str

    def distribution(self, state: HostState) -> tuple[float, ...]:
        ...

    def learn(self, state: HostState, action_fraction: float, loss: float) -> None:
        """Hear an outcome. Hand-made trees ignore it; fitted experts use it."""
        ...

    # Optional, for a restart that should not re-read every outcome ever recorded: an
    # expert whose state depends only on its last ``recall_window`` outcomes and on how
    # many it heard has ``recall_window`` and ``recall(outcomes, seen)`` (become what it
    # would be after hearing ``seen`` outcomes, of which ``outcomes`` are the last).
    # Experts without them are re-taught every outcome (``AsaxLearner.recall``).


def leaf_distribution(generosity: float, m: int) -> tuple[float, ...]:
    """A leaf's distribution: a bell over a_j centred on generosity * a_max, with a floor."""
    if not 0.0 <= generosity <= 1.0:
        raise InvalidInput(f"leaf generosity must lie in [0, 1], got {generosity!r}")
    acts = action_fractions(m)
    centre = generosity * acts[-1]
    raw = [math.exp(-((a - centre) ** 2) / (2 * LEAF_SPREAD ** 2)) + LEAF_FLOOR for a in acts]
    total = sum(raw)
    return tuple(r / total for r in raw)


class ThresholdTreeExpert:
    """A hand-made two-level tree: split on one metric's bins, then on Hp's three bins.

    ``generosity[k][h]`` is the leaf for metric bin k and Hp bin h. Leaves are
    precomputed, so a decision is two bisections and a lookup.
    """

    def __init__(self, name: str, metric: str, edges: Sequence[float],
                 generosity: Sequence[Sequence[float]], m: int = 10):
        if len(generosity) != len(edges) + 1 or any(len(row) != len(HP_EDGES) + 1 for row in generosity):
            raise InvalidInput(
                f"expert {name}: need {len(edges) + 1} metric bins x {len(HP_EDGES) + 1} Hp bins of leaves"
            )
        self.name = name
        self.metric = metric
        self.edges = tuple(edges)
        self.m = m
        self.generosity = tuple(tuple(row) for row in generosity)
        self._leaves = tuple(tuple(leaf_distribution(g, m) for g in row) for row in self.generosity)
        # metric_value is this class's own and reads a numeric field (not a subclass's rule)
        self._plain_metric = metric != "stage_type" and \
            type(self).metric_value is ThresholdTreeExpert.metric_value

    def metric_value(self, state: HostState) -> float:
        if self.metric == "stage_type":
            return 1.0 if state.stage_type is StageType.PARALLEL else 0.0
        return float(getattr(state, self.metric))

    def leaf_index(self, state: HostState) -> tuple[int, int]:
        if self._plain_metric:   # the metric is a float field: read it directly
            v = getattr(state, self.metric)
            k = bisect_right(self.edges, v if type(v) is float else float(v))
        else:
            k = bisect_right(self.edges, self.metric_value(state))
        hp = state.happiness
        h = HP_UNKNOWN_BIN if hp is None else bisect_right(HP_EDGES, hp)
        return k, h

    def distribution(self, state: HostState) -> tuple[float, ...]:
        k, h = self.leaf_index(state)
        return self._leaves[k][h]

    def keyed_distribution(self, state: HostState) -> tuple[object, tuple[float, ...]]:
        """(key, distribution): the same key always comes with the same distribution (the
        leaf), so the learner may reuse a mixture computed for it (``AsaxLearner.decide``)."""
        key = self.leaf_index(state)
        return key, self._leaves[key[0]][key[1]]

    def learn(self, state: HostState, action_fraction: float, loss: float) -> None:
        return None

    recall_window = 0   # it learns nothing: a restart re-reads no outcome for it

    def recall(self, outcomes, seen: int) -> None:
        return None

    @property
    def leaf_count(self) -> int:
        return sum(len(row) for row in self._leaves)


def paper_experts(m: int = 10) -> list[ThresholdTreeExpert]:
    """The four hand-made experts of the paper, one per metric (section 3.1, Fig. 2).

    Rows are metric bins (low to high); columns are Hp < 1, Hp near 1, Hp >= 1.1.
    A host likely to overrun (Hp < 1) lends (almost) nothing; low use with slack lends most.
    """
    action_fractions(m)  # validates m
    return [
        # CPU % of the allocation: < 25, 25-75, > 75 (Fig. 2's nine leaves).
        ThresholdTreeExpert("cpu", "cpu_percent", (25.0, 75.0),
                            ((0.05, 0.5, 0.9), (0.0, 0.3, 0.55), (0.0, 0.05, 0.2)), m),
        # Memory % of the allocation: < 40, 40-80, > 80. A full memory must not be shared.
        ThresholdTreeExpert("mem", "mem_percent", (40.0, 80.0),
                            ((0.05, 0.5, 0.8), (0.0, 0.25, 0.45), (0.0, 0.0, 0.05)), m),
        # Stage type: sequential stages leave all but one core idle.
        ThresholdTreeExpert("stage", "stage_type", (0.5,),
                            ((0.1, 0.6, 0.9), (0.0, 0.2, 0.45)), m),
        # Elapsed share of walltime: < 25 %, 25-50 %, 50-75 %, >= 75 %. Early Hp is noisy.
        ThresholdTreeExpert("elapsed", "elapsed_fraction", (0.25, 0.5, 0.75),
                            ((0.0, 0.3, 0.5), (0.0, 0.4, 0.6), (0.0, 0.4, 0.7), (0.0, 0.3, 0.7)), m),
    ]


class IoExpert(ThresholdTreeExpert):
    """Beyond the paper: a hand-made tree on file I/O (MB/s), then Hp.

    The paper's experts see CPU, memory, stage type and elapsed time, not I/O, though two
    I/O-heavy jobs on the same storage slow each other whatever their CPU quotas. Its
    metric is the host's I/O rate as the node agent samples it, or, when the guest's class
    is known to do file I/O too, the smaller of the two rates: the pair's I/O contention.
    Design rule as the others': lend more when little I/O meets and the host is happy.
    Unknown host I/O (a backend that does not measure it) falls in the middle bin.
    """

    def __init__(self, m: int = 10, edges: Sequence[float] = (5.0, 20.0)):
        super().__init__("io", "io_mb_s", edges,
                         ((0.05, 0.5, 0.8), (0.0, 0.25, 0.45), (0.0, 0.0, 0.1)), m)

    def metric_value(self, state: HostState) -> float:
        v = state.io_mb_s
        if v is None:   # the middle bin: between the edges
            return (self.edges[0] + self.edges[-1]) / 2.0
        if state.guest_io_mb_s is not None:
            return min(float(v), float(state.guest_io_mb_s))
        return float(v)


PAIR_SPREAD = 0.05   # the pair expert is sure of its answer: a narrow bell
PAIR_TOLERANCE = 0.10   # the largest predicted slowdown of either job it accepts


class PairExpert:
    """Beyond the paper: an expert that sees the guest too, and predicts what each quota
    does to the pair with the site's calibrated interference model.

    For every action a it predicts the slowdown of the host (quota 1 - a x guest_share,
    beside a guest busy min(u_guest, a) on its share of the cores) and of the guest
    (quota a, beside the host), with ``coscheduler.backends.interference.CALIBRATED``
    (what ``cosched calibrate`` measured), from what the state tells: both jobs' CPU and
    memory use and the guest's cores over the host's. It favours the action whose worse
    predicted slowdown is smallest (the larger one on ties), as a narrow bell; a_0 when
    even that exceeds ``tolerance``, when memory cannot hold both or when the host is
    unhappy (Hp < 1). Without knowledge of the guest it has no opinion (uniform), so it
    neither gains nor loses weight from those decisions. Each job computes (1 - its
    waiting share) of its time (``HostState.wait_share``, ``guest_wait_share``; a host
    without one: one half when sequential, 1 - u otherwise), and its waiting is on files
    when its class does file I/O. ``idle_guests``: the guest runs in the idle class.
    """

    name = "pair"

    def __init__(self, m: int = 10, tolerance: float = PAIR_TOLERANCE, model=None,
                 idle_guests: bool = False):
        from ..backends.interference import CALIBRATED   # pure arithmetic, no backend

        self.m = m
        self.idle_guests = idle_guests   # guests run in the idle class (cpu.idle)
        self.actions = action_fractions(m)
        self.tolerance = tolerance
        self.model = model if model is not None else CALIBRATED
        self._uniform = tuple(1.0 / m for _ in range(m))
        self._bells = {j: _bell(a, m, PAIR_SPREAD) for j, a in enumerate(self.actions)}

    def predicted(self, state: HostState, j: int) -> float | None:
        """The worse of the two jobs' predicted slowdowns (runtime over alone, minus 1)
        under action j; None without knowledge of the guest."""
        return self.predicted_at(state, self.actions[j])

    def predicted_at(self, state: HostState, a: float) -> float | None:
        """``predicted`` for a quota fraction a of the guest's cores (0 <= a < 1)."""
        pair = self.predicted_pair(state, a)
        return None if pair is None else max(pair)

    def predicted_pair(self, state: HostState, a: float) -> tuple[float, float] | None:
        """The host's and the guest's predicted slowdowns at a quota fraction a of the
        guest's cores; None without knowledge of the guest."""
        from ..backends.interference import JobDemand

        g, gm = state.guest_cpu_percent, state.guest_mem_percent
        if g is None or gm is None or a <= 0.0:
            return None if g is None or gm is None else (0.0, 0.0)
        f = 1.0 if state.guest_share is None else min(1.0, state.guest_share)
        u_h = min(1.0, state.cpu_percent / 100.0)
        u_g = min(1.0, g / 100.0)
        wait_h = state.wait_share
        if wait_h is None:
            wait_h = 0.5 if state.stage_type is StageType.SEQUENTIAL else 1.0 - u_h
        wait_g = 1.0 - u_g if state.guest_wait_share is None else state.guest_wait_share
        # Off-CPU time is disk waiting for a job that does file I/O, sleep otherwise.
        host = JobDemand(cpu=u_h, wait=wait_h, io=wait_h if state.io_mb_s else 0.0)
        guest = JobDemand(cpu=u_g, wait=wait_g, io=wait_g if state.guest_io_mb_s else 0.0,
                          idle=self.idle_guests)
        q_h = 1.0 - a * f
        if q_h <= 0:
            return (math.inf, math.inf)
        share = state.mem_percent / 100.0 + gm / 100.0 * f
        r_h = self.model.rate(host, q_h, [(guest, a, f)], share)
        r_g = self.model.rate(guest, a, [(host, q_h, 1.0)], share)
        return (1.0 / r_h - 1.0 if r_h > 0 else math.inf,
                1.0 / r_g - 1.0 if r_g > 0 else math.inf)

    def action(self, state: HostState) -> int | None:
        """The action index it favours, or None without knowledge of the guest."""
        if state.guest_cpu_percent is None or state.guest_mem_percent is None:
            return None
        if state.happiness is not None and state.happiness < HP_EDGES[0]:
            return 0
        f = 1.0 if state.guest_share is None else state.guest_share
        if state.mem_percent + state.guest_mem_percent * f > 100.0:
            return 0
        best, best_j = math.inf, 0
        for j in range(1, self.m):
            s = self.predicted(state, j)
            if s is not None and s <= best + 1e-12:
                best, best_j = s, j
        return best_j if best <= self.tolerance else 0

    def distribution(self, state: HostState) -> tuple[float, ...]:
        j = self.action(state)
        return self._uniform if j is None else self._bells[j]

    def learn(self, state: HostState, action_fraction: float, loss: float) -> None:
        return None

    recall_window = 0

    def recall(self, outcomes, seen: int) -> None:
        return None


def _bell(centre: float, m: int, spread: float) -> tuple[float, ...]:
    acts = action_fractions(m)
    raw = [math.exp(-((a - centre) ** 2) / (2 * spread ** 2)) + LEAF_FLOOR for a in acts]
    total = sum(raw)
    return tuple(r / total for r in raw)


EXTRA_EXPERTS = ("pair", "io")


def extra_expert(name: str, m: int = 10) -> Expert:
    """An optional expert by name (``pair``, ``io``), beyond the paper's four."""
    if name == "pair":
        return PairExpert(m)
    if name == "io":
        return IoExpert(m)
    raise InvalidInput(f"unknown expert {name!r}: the optional experts are {', '.join(EXTRA_EXPERTS)}")
