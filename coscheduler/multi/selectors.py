"""The window optimiser as a selector of the simulator's selection seam.

At each decision the engine asks for the next job to try. ``WindowOptimiser`` answers the
first question of a decision by solving the window (``optimiser.choose``) and then hands
out the chosen jobs one by one (each fits: the subset fits as a whole). Once they have
started, no other window job fits (every Pareto-optimal subset is maximal), so its next
answer, the window's first job in base order, becomes the head: the reservation that keeps
every job from starving.

While the head waits, the optimiser also chooses the backfilled jobs
(``backfill_choice``; MultiSched: the window of candidate jobs is optimised, with
backfilling): the engine shows it the first ``window`` jobs in base order that EASY allows
to start now (``"backfill"`` views), and it solves that window with EASY's reservation as
extra constraints (jobs still running at the head's shadow time must fit, together, in
what the head leaves free then), hands the chosen jobs out, and solves the next candidate
window when those have started, until no candidate is left. The head's start time is
never delayed beyond EASY's.

``objectives`` picks the resources whose utilisation is maximised: all (MultiSched/ROME)
or nodes and burst buffer only (the BBSched-like baseline); every resource is always a
constraint, since the engine starts nothing that does not fit.
"""

from __future__ import annotations

import time

import numpy as np

from ..policies.selection import ChoiceView, Scorer
from . import optimiser
from .mrsch import pool_info


class WindowOptimiser(Scorer):
    def __init__(self, window: int = 10, objectives: tuple[str, ...] | None = None,
                 name: str = "optimiser", seed: int = 0, backfill_choice: bool = True):
        super().__init__(name, window, "runnable")
        self.objectives = objectives
        self.seed = seed
        self._plan: list[int] = []
        self._plan_at: float | None = None
        self._plan_kind = ""
        # choose among EASY's candidates too (see the module doc); False: queue order
        self.backfill_choice = backfill_choice
        self.timings: list[float] = []   # wall seconds per solved window
        self.cpu_timings: list[float] = []  # CPU seconds of this thread per solved window
        self.sizes: list[int] = []       # candidates per solved window

    def _solve(self, view: ChoiceView) -> list[int]:
        e = pool_info(view)
        runnable = np.flatnonzero(view.runnable)
        if len(runnable) == 0:
            return []
        need = np.column_stack([view.need[runnable], e["pool_take"][runnable]])
        free = np.concatenate([[view.free_nodes], e["pool_free"]])
        cap = np.concatenate([[view.total_nodes], e["pool_cap"]])
        used = cap - free
        obj = None
        if self.objectives is not None:
            names = ("nodes", *e["pool_names"])
            obj = np.array([i for i, n in enumerate(names) if n in self.objectives])
        reserve = None
        if view.kind == "backfill":
            r = e["reserve"]
            reserve = (r["past_shadow"][runnable],
                       np.concatenate([[r["nodes"]], r["pools"]]))
        t0, c0 = time.perf_counter(), time.thread_time()
        mask = optimiser.choose(need, free, used, cap, obj, seed=self.seed, reserve=reserve)
        self.timings.append(time.perf_counter() - t0)
        self.cpu_timings.append(time.thread_time() - c0)
        self.sizes.append(len(runnable))
        self.seed += 1
        return [int(view.jobs[i]) for i in runnable[mask]]

    def scores(self, view: ChoiceView) -> np.ndarray:  # pragma: no cover - choose is used
        return -np.arange(view.size, dtype=float)

    def _next(self, view: ChoiceView) -> int | None:
        """The position of the plan's next job in ``view`` (None: no planned job there)."""
        while self._plan:
            job = self._plan.pop(0)
            where = np.flatnonzero(view.jobs == job)
            if len(where):
                return int(where[0])
        return None

    def choose(self, view: ChoiceView) -> int:
        if view.kind == "backfill":
            if self._plan_kind != "backfill" or self._plan_at != view.now:
                self._plan = []
            pos = self._next(view)
            if pos is None:  # a new candidate window: solve it (each candidate fits alone)
                self._plan = self._solve(view)
                self._plan_at, self._plan_kind = view.now, "backfill"
                pos = self._next(view)
            return 0 if pos is None else pos
        if self._plan_kind != "pick" or self._plan_at != view.now:
            self._plan = self._solve(view)
            self._plan_at, self._plan_kind = view.now, "pick"
        pos = self._next(view)
        return 0 if pos is None else pos  # plan done: the first job in base order heads
