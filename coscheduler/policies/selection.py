"""The selection seam: queue policies that look at the whole waiting window and the machine.

A key-function ``QueuePolicy`` (``queue.py``) ranks each job alone. A *selector* is the
general form that learned schedulers need (RLScheduler, SchedInspector) and that later
multi-resource schedulers can reuse: at each decision it sees

- the waiting window: up to ``window`` jobs in queue order (the selector's
  ``queue_policy``), each with submit time, processors, estimate and whole nodes needed;
- the machine: free and total nodes, and the running jobs' estimated ends with their nodes;

and answers one question (``ChoiceView.kind``):

- ``"pick"`` (a *scorer*): which window job becomes the next head. ``Scorer.scores`` gives
  one score per window job (higher goes first); ``choose`` takes the best allowed one;
- ``"inspect"`` (an *inspector*): accept or reject the base policy's pick (window position
  0). A rejected job waits at least ``retry_after`` seconds, at most ``max_rejections``
  times; after that it is accepted without asking.

- ``"backfill"`` (a scorer whose ``backfill_choice`` is True): which of EASY's backfill
  candidates starts next while a head holds its reservation; the view shows the first
  ``window`` candidates in queue order (each fits now without delaying the head) and
  ``extra["reserve"]`` the reservation (see ``sim.decision.easy_selected``). Other
  scorers backfill in queue order, as before.

Selectors are pure: plain numbers and numpy arrays in, a number or a bool out. The
simulator asks them inside its decision step (``sim/decision.py``); ``order_by_scores``
turns a scorer's scores into one ranking for callers that order a whole queue at once
(the live controller, the Slurm priority hook: scores become priorities).

``ChoiceView.extra`` is free room for resources beyond nodes (burst buffer, power...):
the simulator leaves it empty; a multi-resource engine fills it for its own selectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..model import InvalidInput
from .queue import POLICIES, QueuePolicy

DEFAULT_WINDOW = 128
# SchedInspector's retry delay after a rejection (the reference's SKIP_TIME) and the most
# rejections one job can get before it is accepted without asking.
RETRY_AFTER_S = 600.0
MAX_REJECTION_TIMES = 10

# Action-mask rules of a scorer: "padding" lets it pick any waiting job (the reference:
# a pick that cannot start becomes the head and waits); "runnable" lets it pick only jobs
# that can start now, unless none can (then any job, which becomes the head).
MASK_RULES = ("runnable", "padding")


@dataclass
class ChoiceView:
    """What a selector sees at one decision (arrays have one entry per window job)."""

    kind: str                    # "pick", "inspect" or "backfill"
    now: float
    free_nodes: int
    total_nodes: int
    procs_per_node: int
    jobs: np.ndarray             # the caller's job indices (positions in the replayed list)
    submit: np.ndarray           # seconds
    procs: np.ndarray            # processors requested
    estimate: np.ndarray         # seconds (user estimate)
    need: np.ndarray             # whole nodes
    running_end: np.ndarray      # estimated ends of running jobs, ascending
    running_need: np.ndarray     # their nodes, aligned with running_end
    queue_length: int            # waiting jobs in all (the window may show fewer)
    rejections: int = 0          # "inspect": times the pick was rejected before
    extra: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.jobs)

    @property
    def wait(self) -> np.ndarray:
        return self.now - self.submit

    @property
    def runnable(self) -> np.ndarray:
        ok = self.need <= self.free_nodes
        take = self.extra.get("pool_take")
        if take is not None:  # a multi-resource engine: every pool must fit too
            ok = ok & (take <= self.extra["pool_free"]).all(axis=1)
        return ok

    def earliest_start(self) -> np.ndarray:
        """Seconds from now until each window job would fit, by running jobs' estimated
        ends alone (no queued job counted); 0 for jobs that fit now. An end already past
        counts as now."""
        free_after = self.free_nodes + np.cumsum(self.running_need)
        # first running end after which enough nodes are free
        k = np.searchsorted(free_after, self.need, side="left")
        ends = np.append(np.maximum(self.running_end - self.now, 0.0), np.inf)
        wait = ends[np.minimum(k, len(self.running_end))]
        return np.where(self.runnable, 0.0, wait)


@runtime_checkable
class Selector(Protocol):
    """Anything the simulator can ask: see the module docstring."""

    name: str
    kind: str                    # "scorer" or "inspector"
    queue_policy: QueuePolicy    # window order (FCFS for a scorer; the base for an inspector)
    window: int

    def choose(self, view: ChoiceView) -> int | bool: ...


def action_mask(view: ChoiceView, rule: str = "runnable") -> np.ndarray:
    """Which window positions a scorer may pick under ``rule`` (see ``MASK_RULES``)."""
    if rule == "padding":
        return np.ones(view.size, dtype=bool)
    runnable = view.runnable
    return runnable if runnable.any() else np.ones(view.size, dtype=bool)


class Scorer:
    """Base of scoring selectors: subclasses give ``scores``; ``choose`` is shared."""

    kind = "scorer"

    def __init__(self, name: str, window: int = DEFAULT_WINDOW, mask: str = "runnable"):
        if mask not in MASK_RULES:
            raise InvalidInput(f"unknown mask rule {mask!r}; valid: {', '.join(MASK_RULES)}")
        if not isinstance(window, int) or window < 1:
            raise InvalidInput(f"selector window must be an integer >= 1, got {window!r}")
        self.name = name
        self.window = window
        self.mask = mask
        self.queue_policy = POLICIES["FCFS"]

    def scores(self, view: ChoiceView) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def choose(self, view: ChoiceView) -> int:
        scores = np.asarray(self.scores(view), dtype=float)
        allowed = action_mask(view, self.mask)
        return int(np.argmax(np.where(allowed, scores, -np.inf)))


class Inspector:
    """Base of inspecting selectors: subclasses give ``accept``."""

    kind = "inspector"

    def __init__(self, name: str, base: QueuePolicy, window: int = DEFAULT_WINDOW,
                 max_rejections: int = MAX_REJECTION_TIMES,
                 retry_after: float = RETRY_AFTER_S):
        if not isinstance(max_rejections, int) or max_rejections < 0:
            raise InvalidInput(f"max_rejections must be an integer >= 0, got {max_rejections!r}")
        if not retry_after > 0:
            raise InvalidInput(f"retry_after must be > 0 seconds, got {retry_after!r}")
        self.name = name
        self.queue_policy = base
        self.window = window
        self.max_rejections = max_rejections
        self.retry_after = float(retry_after)

    def accept(self, view: ChoiceView) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def choose(self, view: ChoiceView) -> bool:
        return bool(self.accept(view))


class KeyScorer(Scorer):
    """A key-function policy seen as a scorer (score = minus its key): for tests and for
    comparing the seam with the fast path."""

    def __init__(self, policy: QueuePolicy, window: int = DEFAULT_WINDOW):
        super().__init__(f"{policy.name}-as-scorer", window, mask="padding")
        self.policy = policy

    def scores(self, view: ChoiceView) -> np.ndarray:
        key = self.policy.key
        keys = [key(view.now, s, int(p), e) for s, p, e in zip(view.submit, view.procs, view.estimate)]
        # rank so that tuple keys (SJF) work too; ties go to the earlier position
        order = sorted(range(len(keys)), key=lambda i: (keys[i], view.submit[i], i))
        scores = np.empty(len(keys))
        scores[order] = -np.arange(len(keys), dtype=float)
        return scores


class AcceptAll(Inspector):
    """An inspector that never rejects: replays its base policy exactly."""

    def __init__(self, base: QueuePolicy):
        super().__init__(f"{base.name}+accept-all", base)

    def accept(self, view: ChoiceView) -> bool:
        return True


class RejectBlocked(Inspector):
    """A hand-written inspector: reject the base policy's pick when it cannot start on the
    free nodes now, so that a job behind it that fits may start (the rejection limit and
    the retry delay bound how long the pick waits). The learned inspectors are reported
    beside it (``cosched simulate learned``) and can start from it (``cosched train
    inspector --imitate reject-blocked``; ``learned/teachers.py`` reads the same rule off
    the observation row).

    ``max_rejections`` is the rule's one real setting: SchedInspector's 10 keeps a pick
    waiting at most ten decisions; a large budget makes the rule start the first job in
    the base order that fits, as backfilling without a reservation would, at the price of
    the widest jobs' waits (``learned/budget.py`` chooses it on a trace's training part)."""

    def __init__(self, base: QueuePolicy, max_rejections: int = MAX_REJECTION_TIMES,
                 retry_after: float = RETRY_AFTER_S):
        name = f"{base.name}+reject-blocked"
        if max_rejections != MAX_REJECTION_TIMES:
            name += f"/{max_rejections}"   # the budget changes what the rule does: say it
        super().__init__(name, base, max_rejections=max_rejections, retry_after=retry_after)

    def accept(self, view: ChoiceView) -> bool:
        return bool(view.need[0] <= view.free_nodes)


def machine_view(now: float, jobs: Sequence[Sequence[float]], free_nodes: int, total_nodes: int,
                 procs_per_node: int = 1, running: Sequence[tuple[float, int]] = (),
                 kind: str = "pick") -> ChoiceView:
    """A ``ChoiceView`` over ``jobs`` (each ``(submit, procs, estimate)``, in queue order)
    for callers outside the simulator; ``running`` holds ``(estimated end, nodes)``."""
    arr = np.asarray(jobs, dtype=float).reshape(-1, 3)
    procs = arr[:, 1].astype(np.int64)
    run = sorted(running)
    return ChoiceView(
        kind=kind, now=float(now), free_nodes=int(free_nodes), total_nodes=int(total_nodes),
        procs_per_node=int(procs_per_node), jobs=np.arange(len(arr)), submit=arr[:, 0],
        procs=procs, estimate=arr[:, 2], need=-(-procs // int(procs_per_node)),
        running_end=np.array([e for e, _ in run], dtype=float),
        running_need=np.array([n for _, n in run], dtype=np.int64), queue_length=len(arr))


def order_by_scores(scorer: Scorer, now: float, jobs: Sequence[Sequence[float]],
                    free_nodes: int, total_nodes: int, procs_per_node: int = 1,
                    running: Sequence[tuple[float, int]] = ()) -> tuple[list[int], np.ndarray]:
    """Rank ``jobs`` (each ``(submit, procs, estimate)``) by one scoring of the window.

    The first ``scorer.window`` jobs in FCFS order are scored once, highest first (ties:
    FCFS); jobs beyond the window follow in FCFS order. Returns the positions in run order
    and the window's scores (aligned with the returned order's first entries). This is
    the one-shot form that a whole-queue caller (Slurm priorities) needs; the simulator
    asks again after every start instead.
    """
    fcfs = sorted(range(len(jobs)), key=lambda i: (jobs[i][0], i))
    shown = fcfs[:scorer.window]
    view = machine_view(now, [jobs[i] for i in shown], free_nodes, total_nodes,
                        procs_per_node, running)
    view.queue_length = len(jobs)
    scores = np.asarray(scorer.scores(view), dtype=float)
    ranked = sorted(range(len(shown)), key=lambda k: (-scores[k], k))
    return [shown[k] for k in ranked] + fcfs[scorer.window:], scores[ranked]


class InspectedRanking:
    """An inspector for callers that rank a whole queue again and again (the live
    controller, the Slurm priority hook).

    Each call ranks the queue by the base policy; the top job that is not waiting out a
    rejection is shown to the inspector (with the first ``window`` such jobs as its
    window). A rejected job goes to the end of the ranking for ``retry_after`` seconds
    (then it is asked again), at most ``max_rejections`` times: the nearest a live queue
    comes to the simulator's "start nothing now, try again later".
    """

    kind = "inspected"

    def __init__(self, inspector: Inspector):
        self.inspector = inspector
        self.name = inspector.name
        self.times: dict = {}
        self.until: dict = {}

    def rank(self, now: float, jobs: Sequence[Sequence[float]], ids: Sequence,
             free_nodes: int, total_nodes: int, procs_per_node: int = 1,
             running: Sequence[tuple[float, int]] = ()) -> list[int]:
        from .queue import order_queue

        insp = self.inspector
        order = order_queue(insp.queue_policy, now, jobs)
        waiting = [p for p in order if self.until.get(ids[p], float("-inf")) <= now]
        resting = [p for p in order if self.until.get(ids[p], float("-inf")) > now]
        if waiting:
            top = waiting[0]
            times = self.times.get(ids[top], 0)
            if times < insp.max_rejections:
                view = machine_view(now, [jobs[p] for p in waiting[:insp.window]], free_nodes,
                                    total_nodes, procs_per_node, running, kind="inspect")
                view.queue_length = len(jobs)
                view.rejections = times
                if not insp.choose(view):
                    self.times[ids[top]] = times + 1
                    self.until[ids[top]] = now + insp.retry_after
                    waiting.pop(0)
                    resting.append(top)
        return waiting + resting
