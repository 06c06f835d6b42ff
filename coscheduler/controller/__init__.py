"""The controller: one loop that drives any backend with any co-allocation policy.

A pass (``Controller.step``) is a fixed pipeline of small stages, like a scheduling cycle
of the Kubernetes scheduler framework:

1. drain: collect finished jobs; a finished host's pending decisions get their loss
   (``happiness.host_loss`` against its class's alone runtime when known) and go to the
   learner and the recorder; a guest's end gives its host its quota back; a host's end
   gives its guests full quota; a job that ran alone records its class's alone runtime;
   a failed or cancelled host or guest resolves its decisions as ``cancelled`` with the
   reason (never lost, never silently dropped).
   Then the running jobs are read and quotas reconciled: every job that is not a guest
   should hold ``1 - lent / cores`` (1.0 without guests); where the backend reports
   otherwise (a failed write, a restart that missed an end) it is set again.
2. metrics: the latest sample per job; a missing or invalid one is "unknown" (Hp None).
   A host whose Hp already shows it cannot finish in time gets its loss early
   (``projected``), as DESIGN.md allows.
3. order: the queue-ordering callable (default FCFS by submit time, then job id).
4. place: for each queued job in order, first-fit gang allocation on free cores with
   EASY backfilling (the first job that does not fit gets a reservation at the earliest
   time enough cores free up, from running jobs' start + walltime; later jobs start only
   if they do not delay it); if it does not fit, the co-allocation policy is asked over
   the candidate hosts in first-fit order.
5. act: start jobs and set quotas through the backend, and record every decision. A
   backend error never crashes the pass: the guest goes back to the queue (reported
   failed with the reason after ``max_start_attempts``) and the host gets its quota back.

A host is asked at most once per pass; a host that declined a guest is not asked again
for that guest for ``decline_cooldown_s``; at most ``max_candidates_per_guest`` hosts are
asked per guest per pass. Hosts are indexed by their spare room (max trees over one rank
order), so a guest's candidates cost O(log n) each, not a walk over the running jobs; the
experts' mixture is computed once per (class, leaves, weights), not per (host, guest) pair;
a recorder that can batch (the SQLite store) gets a pass's writes in one transaction; the
cyclic garbage collector waits for the end of the pass. Decisions are the same as before
these (tests/test_controller_replay.py replays recorded passes).

The controller keeps little state of its own, and all of it can be rebuilt: the learner
from ``recorder.load()`` and the host/guest relations from ``backend.running()``
(``Controller.from_recorder``).

Where things are (read in this order):

- ``loop.py``: the ``Controller``; ``step`` runs the pass, one method per stage; stage 4
  (place) is there, the others in mixins: ``drain.py`` (stages 1-2), ``act.py`` (stage 5
  and quotas), ``feedback.py`` (learner feedback, the recorder's writes).
- ``order.py``: stage 3, the queue orders (``fcfs``, ``order_by``).
- ``placement.py``: stage 4 on free cores: first-fit and the EASY reservation (pure).
- ``hosts.py``: stage 4 inside running jobs: the candidate hosts for a guest (pure), with
  ``maxtree.py`` (the index's trees) and ``hoststate.py`` (what the experts see of a host).
- ``quotas.py``: the quota a host should hold given its guests (pure).
- ``config.py``: ``ControllerConfig`` (the knobs) and ``PassReport`` (what a pass did).
"""

from .config import ControllerConfig, PassReport
from .loop import Controller
from .order import QueueOrder, fcfs, order_by

__all__ = ["Controller", "ControllerConfig", "PassReport", "QueueOrder", "fcfs", "order_by"]
