"""Queue-ordering policies as pure key functions over plain numbers.

A policy maps one waiting job to a sortable key, ``key(now, submit, procs, estimate)``;
the queue runs smallest key first. Ties are broken by submit time, then by position
(``order_queue`` and the simulator both do this), so a key function never has to.

With ``w = now - submit``, ``n = procs``, ``est = estimate`` and ``s = submit``:

========  =====================================  ==================================
FCFS      ``s``                                  first come, first served
LCFS      ``-s``                                 last come, first served
SJF       ``(est, s)``                           shortest (estimated) job first
SAF       ``est * n``                            smallest area first
SRF       ``est / n``                            smallest ratio first
WFP3      ``-(w / est)**3 * n``                  Tang et al. 2009, favours long waits
UNICEP    ``-w / (log2(n) * est)``               Tang et al. 2009
F1        ``log10(est) * n + 870 * log10(s)``    Carastan-Santos & de Camargo, SC'17
========  =====================================  ==================================

Preconditions (the callers' input validation guarantees them; the keys are on the hot
path and do not re-check): ``estimate > 0``, ``procs >= 1``, ``submit >= 0``.

Two limits are taken where the formula is undefined: UNICEP for ``n = 1`` divides by
``log2(1) = 0``, so a one-processor job that has waited gets ``-inf`` (it goes first) and at
zero wait its key is 0; F1 at ``s = 0`` has ``log10(0) = -inf``, so the job goes first.

The same objects order the simulator's queue, the live controller's queue and a real
Slurm queue (through the priority hook), so nothing here knows about any of them.
``uses_now`` tells a caller whether keys change while a job waits: when it is False the
key can be computed once, at submission.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ..model import InvalidInput

KeyFunction = Callable[[float, float, int, float], object]
_NEG_INF = float("-inf")


@dataclass(frozen=True)
class QueuePolicy:
    """A named queue order: smallest ``key(now, submit, procs, estimate)`` first."""

    name: str
    key: KeyFunction
    uses_now: bool
    description: str

    def __call__(self, now: float, submit: float, procs: int, estimate: float) -> object:
        return self.key(now, submit, procs, estimate)


def _fcfs(now: float, submit: float, procs: int, estimate: float) -> float:
    return submit


def _lcfs(now: float, submit: float, procs: int, estimate: float) -> float:
    return -submit


def _sjf(now: float, submit: float, procs: int, estimate: float) -> tuple[float, float]:
    return (estimate, submit)


def _saf(now: float, submit: float, procs: int, estimate: float) -> float:
    return estimate * procs


def _srf(now: float, submit: float, procs: int, estimate: float) -> float:
    return estimate / procs


def _wfp3(now: float, submit: float, procs: int, estimate: float) -> float:
    return -((now - submit) / estimate) ** 3 * procs


def _unicep(now: float, submit: float, procs: int, estimate: float) -> float:
    wait = now - submit
    if procs == 1:
        # log2(1) = 0: the limit is -inf for any positive wait, 0 at zero wait.
        return _NEG_INF if wait > 0 else 0.0
    return -wait / (math.log2(procs) * estimate)


def _f1(now: float, submit: float, procs: int, estimate: float) -> float:
    # log10(0) = -inf: a job submitted at time 0 goes first (ties then by submit, position).
    log_submit = math.log10(submit) if submit > 0 else _NEG_INF
    return math.log10(estimate) * procs + 870.0 * log_submit


POLICIES: dict[str, QueuePolicy] = {
    p.name: p
    for p in (
        QueuePolicy("FCFS", _fcfs, False, "first come, first served: submit time"),
        QueuePolicy("LCFS", _lcfs, False, "last come, first served: -submit time"),
        QueuePolicy("SJF", _sjf, False, "shortest job first: (estimate, submit)"),
        QueuePolicy("SAF", _saf, False, "smallest area first: estimate * procs"),
        QueuePolicy("SRF", _srf, False, "smallest ratio first: estimate / procs"),
        QueuePolicy("WFP3", _wfp3, True, "-(wait / estimate)^3 * procs"),
        QueuePolicy("UNICEP", _unicep, True, "-wait / (log2(procs) * estimate)"),
        QueuePolicy("F1", _f1, False, "log10(estimate) * procs + 870 * log10(submit)"),
    )
}


def policy_names() -> list[str]:
    """The registered policy names, in the registry's order."""
    return list(POLICIES)


def get_policy(name: str) -> QueuePolicy:
    """The policy called ``name`` (case-insensitive); a clear error lists the valid names."""
    policy = POLICIES.get(name.strip().upper()) if isinstance(name, str) else None
    if policy is None:
        raise InvalidInput(
            f"unknown queue policy {name!r}; valid policies: {', '.join(POLICIES)}"
        )
    return policy


def order_queue(
    policy: QueuePolicy,
    now: float,
    jobs: Iterable[Sequence[float]],
) -> list[int]:
    """Positions of ``jobs`` (each ``(submit, procs, estimate)``) in the order to run them.

    Smallest key first; ties by submit time, then by position in ``jobs``. This is the
    entry point for callers outside the simulator (Slurm priority hook, live controller).
    """
    key = policy.key
    entries = []
    for position, job in enumerate(jobs):
        submit, procs, estimate = job
        entries.append((key(now, submit, procs, estimate), submit, position))
    entries.sort()
    return [position for _, _, position in entries]
