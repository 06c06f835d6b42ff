"""Where the controller keeps what the learner learned: the Recorder interface.

The controller calls a Recorder after every decision, outcome and weight update, so that a
restart loses nothing; a recorder with a ``batch()`` context manager (the SQLite store) gets
each pass's writes at the end of the pass, in order, inside one ``batch()``.
``coscheduler.store.SqliteStore`` is the persistent one (embedded default);
``MemoryRecorder`` keeps the same records in memory for tests and the simulator.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Protocol

from .learner import ClassState, Decision, RoundClosed
from .model import InvalidInput

LOSS_KINDS = ("walltime", "degradation", "projected", "declined", "cancelled")


class RecorderUnavailable(InvalidInput):
    """A recorder could not write a good record now but may later (a full disk, an I/O
    error, another writer holding the file): the controller keeps the record and writes
    it again, in order, at its next pass."""


@dataclass(frozen=True)
class OutcomeRecord:
    """The loss a decision earned, and how it was measured."""

    decision_id: int
    time: float
    loss: float
    kind: str                      # one of LOSS_KINDS
    host_runtime_s: float | None = None
    host_walltime_s: float | None = None
    guest_runtime_s: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in LOSS_KINDS:
            raise InvalidInput(f"outcome kind must be one of {LOSS_KINDS}, got {self.kind!r}")


@dataclass
class LoadedState:
    """What a recorder hands back on start: enough to rebuild the learner."""

    classes: list[ClassState] = field(default_factory=list)
    pending: list[Decision] = field(default_factory=list)
    next_decision_id: int = 1
    # (decision, loss) of observed decisions, oldest first, to re-teach fitted experts
    # (with ``observed_per_class``: each class's most recent ones only).
    observed: list[tuple[Decision, float]] = field(default_factory=list)
    # Observed outcomes per class, all of them (how many ``observed`` was cut from).
    observed_counts: dict[str, int] = field(default_factory=dict)
    # With ``related_to=(job ids, since)``: observed decisions that name one of the jobs as
    # host or guest, or declined (a_0) at ``since`` or later, oldest first.
    related: list[tuple[Decision, float]] = field(default_factory=list)


def related_decision(decision: Decision, job_ids, since: float) -> bool:
    """Whether a recorded decision is one ``load(related_to=(job_ids, since))`` returns."""
    return (decision.host_job in job_ids or decision.guest_job in job_ids
            or (decision.action_index == 0 and decision.time >= since))


def classes_kept(classes: list[ClassState], pending_classes: set[str],
                 max_classes: int) -> list[ClassState]:
    """Of saved class states, those a learner bounded to ``max_classes`` would hold when
    given them in this order (``AsaxLearner``: every class with a decision pending, and the
    classes updated last, ties to the later in the list): what a restart needs to read."""
    if len(classes) <= max_classes:
        return classes
    ranked = sorted(range(len(classes)), key=lambda i: (classes[i].last_update or 0.0, i),
                    reverse=True)
    keep = {classes[i].job_class for i in ranked[:max_classes]} | pending_classes
    return [st for st in classes if st.job_class in keep]


class Recorder(Protocol):
    # ``observed_per_class``, ``related_to`` and ``max_classes`` are optional to implement:
    # a recorder whose load() takes none of them is read whole (Controller.from_recorder).
    def load(self, observed_per_class: int | None = None,
             related_to: tuple[set[str], float] | None = None,
             max_classes: int | None = None) -> LoadedState: ...
    def record_decision(self, decision: Decision, host_quota: float, guest_quota: float) -> None: ...
    def record_outcome(self, outcome: OutcomeRecord) -> None: ...
    def record_round(self, closed: RoundClosed) -> None: ...
    def save_class(self, state: ClassState) -> None: ...
    def record_alone_runtime(self, job_class: str, runtime_s: float) -> None: ...
    def alone_runtime(self, job_class: str) -> float | None: ...


class MemoryRecorder:
    """A Recorder that keeps everything in memory (tests, simulator runs)."""

    def __init__(self) -> None:
        self.decisions: dict[int, tuple[Decision, float, float]] = {}
        self.outcomes: dict[int, OutcomeRecord] = {}
        self.rounds: list[RoundClosed] = []
        self.classes: dict[str, ClassState] = {}
        self.alone: dict[str, list[float]] = {}

    def load(self, observed_per_class: int | None = None,
             related_to: tuple[set[str], float] | None = None,
             max_classes: int | None = None) -> LoadedState:
        pending = [d for i, (d, _, _) in sorted(self.decisions.items()) if i not in self.outcomes]
        classes = list(self.classes.values())
        if max_classes is not None:
            classes = classes_kept(classes, {d.job_class for d in pending}, max_classes)
        held = {st.job_class for st in classes}
        observed = [(self.decisions[i][0], o.loss) for i, o in sorted(self.outcomes.items())
                    if i in self.decisions and o.kind != "cancelled"]
        related = [] if related_to is None else [
            (d, loss) for d, loss in observed if related_decision(d, *related_to)]
        if len(held) < len(self.classes):   # (the outcomes of classes not read stay unread)
            observed = [(d, loss) for d, loss in observed
                        if d.job_class in held or d.job_class not in self.classes]
        counts: dict[str, int] = {}
        for d, _ in observed:
            counts[d.job_class] = counts.get(d.job_class, 0) + 1
        if observed_per_class is not None:
            left = dict(counts)   # keep a class's outcome once fewer than the cap follow it
            kept = []
            for d, loss in observed:
                left[d.job_class] -= 1
                if left[d.job_class] < observed_per_class:
                    kept.append((d, loss))
            observed = kept
        nxt = max(self.decisions, default=0) + 1
        return LoadedState(classes, pending, nxt, observed, counts, related)

    def record_decision(self, decision: Decision, host_quota: float, guest_quota: float) -> None:
        self.decisions[decision.decision_id] = (decision, host_quota, guest_quota)

    def record_outcome(self, outcome: OutcomeRecord) -> None:
        if outcome.decision_id not in self.decisions:
            raise InvalidInput(f"outcome for unknown decision id {outcome.decision_id}")
        if outcome.decision_id in self.outcomes:
            raise InvalidInput(f"decision {outcome.decision_id} already has an outcome")
        self.outcomes[outcome.decision_id] = outcome

    def record_round(self, closed: RoundClosed) -> None:
        self.rounds.append(closed)

    def save_class(self, state: ClassState) -> None:
        self.classes[state.job_class] = ClassState.from_dict(state.to_dict())

    def record_alone_runtime(self, job_class: str, runtime_s: float) -> None:
        self.alone.setdefault(job_class, []).append(float(runtime_s))

    def alone_runtime(self, job_class: str) -> float | None:
        runs = self.alone.get(job_class)
        return statistics.median(runs) if runs else None
