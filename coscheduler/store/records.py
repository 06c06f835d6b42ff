"""The Recorder methods of the state database: decisions, outcomes, weight rounds, class
states, exclusive runtimes and walltime credits, each its own transaction (or a savepoint
inside ``SqliteStore.batch``), and ``load`` to rebuild the learner.

A mixin of ``SqliteStore``: it uses the store's ``writing``/``reading`` transactions and the
row conversions of ``RowsMixin``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import statistics
import time
from typing import Callable, Mapping

from ..learner import ClassState, Decision, RoundClosed
from ..model import InvalidInput, check_finite, validate_job_class
from ..recorder import LoadedState, OutcomeRecord
from .retention import (delete_classes, delete_decisions, forgotten_classes, prune_candidates,
                        pruned_counts)
from .errors import StoreError
from .rows import _DECISION_COLS, RowsMixin, _list, _loads

log = logging.getLogger("coscheduler.store")

PRUNE_CHUNK = 2_000   # decisions deleted per write transaction (``prune``)
PRUNE_CLASS_CHUNK = 200   # classes deleted per write transaction (``prune_classes``)
CLASS_BOUND_KEY = "learner_max_classes"   # (meta: ``note_class_bound``)


class RecorderMixin(RowsMixin):
    """``coscheduler.recorder.Recorder`` over the store's tables."""

    # -- the Recorder methods -----------------------------------------------------------------
    def record_decision(self, decision: Decision, host_quota: float, guest_quota: float,
                        class_state: ClassState | None = None) -> None:
        """Save a decision and the quotas applied: CPU quota fractions in [0, 1] (what the
        host keeps of its cores, what the guest gets of its cores). With ``class_state``,
        the class's decision count is saved in the same transaction."""
        row = self._decision_row(decision, host_quota, guest_quota)
        state_row = self._class_row(class_state) if class_state is not None else None
        with self.writing(f"record decision {decision.decision_id}") as conn:
            if conn.execute("SELECT 1 FROM decisions WHERE id = ?", (decision.decision_id,)).fetchone():
                raise InvalidInput(f"decision id {decision.decision_id} is already recorded in {self.path}")
            conn.execute("INSERT INTO decisions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
            if state_row is not None:
                self._upsert_class(conn, state_row)

    def record_outcome(self, outcome: OutcomeRecord) -> None:
        row = self._outcome_row(outcome)
        with self.writing(f"record the outcome of decision {outcome.decision_id}") as conn:
            self._insert_outcome(conn, outcome, row)

    def record_walltime_credit(self, credit: Mapping) -> int | None:
        """Save walltime given back to a host (``slurm_plugin.walltime.WalltimeCredit.as_dict``)
        with the host's latest decision; returns that decision's id (None: it had none)."""
        job_id = str(credit["job_id"])
        vals = [check_finite(credit[k], f"walltime credit {k}") for k in ("time", "limit_s", "projected_end")]
        minutes = int(credit["minutes"])
        if minutes < 1 or any(v is None for v in vals):
            raise InvalidInput(f"walltime credit of job {job_id}: {dict(credit)} is not a credit")
        with self.writing(f"record a walltime credit of job {job_id}") as conn:
            row = conn.execute("SELECT id FROM decisions WHERE host_job = ? ORDER BY id DESC LIMIT 1",
                               (job_id,)).fetchone()
            did = row[0] if row else None
            conn.execute("INSERT INTO walltime_credits (decision_id, job_id, time, minutes, limit_s, "
                         "projected_end, capped) VALUES (?,?,?,?,?,?,?)",
                         (did, job_id, vals[0], minutes, vals[1], vals[2], int(bool(credit.get("capped")))))
        return did

    def walltime_credits(self, decision_id: int) -> list[dict]:
        with self.reading(f"read the walltime credits of decision {decision_id}") as conn:
            rows = conn.execute("SELECT id, job_id, time, minutes, limit_s, projected_end, capped FROM "
                                "walltime_credits WHERE decision_id = ? ORDER BY id", (decision_id,)).fetchall()
        return [self._credit_from_row(decision_id, r) for r in rows]

    def _credit_from_row(self, decision_id: int, r: tuple) -> dict:
        """A walltime credit row through the checks ``record_walltime_credit`` made; a row
        edited in the file is a StoreError naming it, not a traceback in the CLI."""
        where = f"walltime credit {r[0]} of decision {decision_id}"
        try:
            if not isinstance(r[1], str):
                raise InvalidInput(f"job id must be text, got {r[1]!r}")
            t, limit_s, end = (check_finite(v, k) for v, k in
                               ((r[2], "time"), (r[4], "limit_s"), (r[5], "projected_end")))
            if isinstance(r[3], bool) or not isinstance(r[3], int) or r[3] < 1:
                raise InvalidInput(f"minutes must be an integer >= 1, got {r[3]!r}")
        except InvalidInput as exc:
            raise StoreError(f"{self.path}: {where} is not a valid record: {exc}") from None
        return {"job_id": r[1], "time": t, "minutes": r[3], "limit_s": limit_s,
                "projected_end": end, "capped": bool(r[6])}

    def record_round(self, closed: RoundClosed) -> None:
        row = self._round_row(closed)
        with self.writing(f"record round {closed.round} of class {closed.job_class}") as conn:
            self._insert_round(conn, row)

    def prune(self, before: float, keep_per_class: int) -> dict[str, int]:
        """Delete decisions whose outcome came before ``before`` (``retention.prune``: never
        a pending one nor a class's last ``keep_per_class`` observed); the deleted per class."""
        check_finite(before, "prune: before")
        with self.reading(f"find decisions before {before} to prune") as conn:
            rows = prune_candidates(conn, before, keep_per_class)
        return self._delete_in_chunks(rows, PRUNE_CHUNK, f"prune decisions before {before}",
                                      delete_decisions)

    def prune_classes(self, before: float, max_classes: int) -> dict[str, int]:
        """Delete whole the saved classes a learner bounded to ``max_classes`` no longer
        holds and that saw nothing since ``before`` (``retention.forgotten_classes``): per
        class deleted, the decisions deleted with it."""
        check_finite(before, "prune: before")
        with self.reading(f"find the classes past {max_classes} to prune") as conn:
            found = forgotten_classes(conn, before, max_classes)
        return self._delete_in_chunks(
            found, PRUNE_CLASS_CHUNK, f"prune the classes past {max_classes}",
            lambda conn, part: delete_classes(conn, part, before, max_classes))

    def note_class_bound(self, max_classes: int) -> None:
        """Record the class bound of the learner that uses this store (the controller does,
        at each start), so that ``prune_classes`` is not run with a smaller one by mistake."""
        with self.writing(f"record the learner's class bound {max_classes}") as conn:
            conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO "
                         "UPDATE SET value = excluded.value", (CLASS_BOUND_KEY, str(int(max_classes))))

    def class_bound(self) -> int | None:
        """The class bound ``note_class_bound`` recorded last; None if none was."""
        with self.reading("read the learner's class bound") as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (CLASS_BOUND_KEY,)).fetchone()
        try:
            return None if row is None else int(row[0])
        except ValueError:
            return None    # (not ours to judge: the prune then needs --max-classes)

    def _delete_in_chunks(self, items: list, size: int, what: str,
                          delete: Callable[[object, list], dict[str, int]]) -> dict[str, int]:
        """``delete(conn, part)`` over ``items`` in write transactions of ``size``, its
        per-class counts summed. Short transactions: a running controller's pass waits for
        one at most, not for the whole prune (seconds on a large file; past its busy timeout)."""
        deleted: dict[str, int] = {}
        for at in range(0, len(items), size):
            with self.writing(what) as conn:
                for job_class, n in delete(conn, items[at:at + size]).items():
                    deleted[job_class] = deleted.get(job_class, 0) + n
        return deleted

    def save_class(self, state: ClassState) -> None:
        row = self._class_row(state)
        with self.writing(f"save class {state.job_class}") as conn:
            self._upsert_class(conn, row)

    def record_alone_runtime(self, job_class: str, runtime_s: float) -> None:
        validate_job_class(job_class)
        rt = check_finite(runtime_s, f"exclusive runtime of class {job_class}")
        if rt is None or rt <= 0:
            raise InvalidInput(f"exclusive runtime of class {job_class} must be > 0, got {runtime_s!r}")
        with self.writing(f"record an exclusive runtime of class {job_class}") as conn:
            conn.execute("INSERT INTO alone_runtimes (job_class, runtime_s, time) VALUES (?, ?, ?)",
                         (job_class, rt, time.time()))

    def alone_runtime(self, job_class: str) -> float | None:
        """Median of the recorded exclusive runtimes of the class, None if none."""
        with self.reading(f"read exclusive runtimes of class {job_class}") as conn:
            runs = [r[0] for r in conn.execute(
                "SELECT runtime_s FROM alone_runtimes WHERE job_class = ?", (job_class,))]
        return statistics.median(runs) if runs else None

    # -- combined writes (one transaction each) ---------------------------------------------
    def record_update(self, closed: RoundClosed, state: ClassState) -> None:
        """A closed round and the class state after it, atomically."""
        if closed.job_class != state.job_class or closed.round != state.rounds:
            raise InvalidInput(
                f"round {closed.round} of class {closed.job_class} does not match the class state "
                f"({state.job_class}, {state.rounds} rounds)"
            )
        round_row = self._round_row(closed)
        class_row = self._class_row(state)
        with self.writing(f"record round {closed.round} of class {closed.job_class}") as conn:
            self._insert_round(conn, round_row)
            self._upsert_class(conn, class_row)

    def record_observation(self, outcome: OutcomeRecord, state: ClassState,
                           closed: RoundClosed | None = None) -> None:
        """What ``AsaxLearner.observe`` changed, atomically: the outcome, the class state
        (its risk moved) and, if the observation closed a round, that round."""
        if closed is not None and (closed.job_class != state.job_class or closed.round != state.rounds):
            raise InvalidInput(f"round {closed.round} of class {closed.job_class} does not match "
                               f"the class state ({state.job_class}, {state.rounds} rounds)")
        out_row = self._outcome_row(outcome)
        class_row = self._class_row(state)
        round_row = self._round_row(closed) if closed is not None else None
        with self.writing(f"record the outcome of decision {outcome.decision_id}") as conn:
            job_class = self._insert_outcome(conn, outcome, out_row)
            if job_class != state.job_class:
                raise InvalidInput(f"decision {outcome.decision_id} is of class {job_class}, "
                                   f"not of {state.job_class}")
            if round_row is not None:
                self._insert_round(conn, round_row)
            self._upsert_class(conn, class_row)

    # -- loading -----------------------------------------------------------------------------
    def load(self, observed_per_class: int | None = None,
             related_to: tuple[set[str], float] | None = None,
             max_classes: int | None = None) -> LoadedState:
        """Everything needed to rebuild the learner, from one consistent snapshot.

        ``observed`` lists (decision, loss) of non-cancelled outcomes in the order they were
        recorded; ``observed_per_class`` keeps only each class's most recent ones (what a
        fitted expert needs to be restored, ``AsaxLearner.recall_window``), so that a
        restart after months reads thousands of rows, not every one ever written.
        ``observed_counts`` counts them all per class. ``related_to`` = (job ids, since):
        ``related`` lists the observed decisions that name one of those jobs, or declined
        at ``since`` or later (what a restarted controller needs about running jobs and
        cooldowns). ``max_classes``: only the classes a learner bounded to that many would
        hold (``recorder.classes_kept``: those updated last, and every class with a decision
        pending) are read, with their outcomes; the others' rows stay unread.
        """
        observed_sql = ("SELECT {cols}, o.loss FROM outcomes o JOIN decisions d "
                        "ON d.id = o.decision_id WHERE o.kind != 'cancelled' {where} ORDER BY o.seq")
        with self.reading("load the learner state") as conn:
            held = None    # (the class names read, when not every one is)
            if max_classes is not None and conn.execute(
                    "SELECT COUNT(*) FROM classes").fetchone()[0] > max_classes:
                # recorder.classes_kept in SQL: ties to the later name (the rows come in
                # job_class order, as the learner is given them)
                rows = conn.execute(
                    "SELECT job_class, state FROM classes WHERE job_class IN (SELECT job_class "
                    "FROM classes ORDER BY COALESCE(last_update, 0) DESC, job_class DESC LIMIT ?) "
                    "OR job_class IN (SELECT d.job_class FROM decisions d WHERE NOT EXISTS "
                    "(SELECT 1 FROM outcomes o WHERE o.decision_id = d.id)) ORDER BY job_class",
                    (int(max_classes),))
                rows = rows.fetchall()
                held = json.dumps([job_class for job_class, _ in rows])
            else:
                rows = conn.execute("SELECT job_class, state FROM classes ORDER BY job_class").fetchall()
            classes = [st for st in (self._loaded_class(conn, job_class, text) for job_class, text in rows)
                       if st is not None]
            pending = [d for d in map(self._loaded_decision, conn.execute(
                f"SELECT {_DECISION_COLS} FROM decisions d "
                "WHERE NOT EXISTS (SELECT 1 FROM outcomes o WHERE o.decision_id = d.id) ORDER BY d.id"))
                if d is not None]
            counts = pruned_counts(conn)    # (what retention deleted still counts)
            for job_class, n in conn.execute(
                    "SELECT d.job_class, COUNT(*) FROM outcomes o JOIN decisions d ON d.id = o.decision_id "
                    "WHERE o.kind != 'cancelled' GROUP BY d.job_class").fetchall():
                counts[job_class] = counts.get(job_class, 0) + n
            # Not read: the outcomes of the classes not read (a class without a saved state
            # is not one of those: its outcomes still teach its experts).
            only, only_args = "", ()
            if held is not None:
                only = ("AND (d.job_class IN (SELECT value FROM json_each(?)) "
                        "OR d.job_class NOT IN (SELECT job_class FROM classes))")
                only_args = (held,)
            if observed_per_class is None:
                rows = conn.execute(observed_sql.format(cols=_DECISION_COLS, where=only), only_args)
            else:
                # (ranked on ids and classes alone: the wide rows are read for the kept only)
                rows = conn.execute(
                    f"SELECT {_DECISION_COLS}, o.loss FROM (SELECT o.decision_id AS id, ROW_NUMBER() "
                    "OVER (PARTITION BY d.job_class ORDER BY o.seq DESC) AS recent FROM outcomes o "
                    f"JOIN decisions d ON d.id = o.decision_id WHERE o.kind != 'cancelled' {only}) w "
                    "JOIN decisions d ON d.id = w.id JOIN outcomes o ON o.decision_id = w.id "
                    "WHERE w.recent <= ? ORDER BY o.seq", (*only_args, int(observed_per_class)))
            # (row by row from the cursor: the raw rows are never all held beside the decisions)
            observed = [o for o in map(self._loaded_outcome, rows) if o is not None]
            related = []
            if related_to is not None:
                ids, since = related_to
                ids_json = json.dumps(sorted(str(i) for i in ids))
                rows = conn.execute(observed_sql.format(
                    cols=_DECISION_COLS,
                    where="AND (d.host_job IN (SELECT value FROM json_each(?)) "
                          "OR d.guest_job IN (SELECT value FROM json_each(?)) "
                          "OR (d.action_index = 0 AND d.time >= ?))"),
                    (ids_json, ids_json, float(since)))
                related = [o for o in map(self._loaded_outcome, rows) if o is not None]
            top = conn.execute("SELECT MAX(id) FROM decisions").fetchone()[0]
        return LoadedState(classes, pending, (top or 0) + 1, observed, counts, related)

    # A row damaged or edited in the file must not keep the controller from starting (nor
    # make it start with a wrong learner): each is read back through the checks its write
    # passed, and one that fails them is left out of the restart with a WARNING naming its
    # table, its row and what is wrong. Nothing is deleted or rewritten: the row stays in
    # the file for the operator (``cosched decisions show`` names it too).
    def _skipped(self, table: str, row: object, exc: BaseException, what: str = "") -> None:
        reason = str(exc).removeprefix(f"{self.path}: ")
        log.warning("%s: table %s, row %s is damaged and skipped at restart: %s%s",
                    self.path, table, row, reason, what)

    def _loaded_decision(self, r: tuple) -> Decision | None:
        try:
            decision = self._decision_from_row(r)
            self._check_read_decision(decision)
        except (InvalidInput, TypeError, ValueError) as exc:   # (StoreError is one)
            self._skipped("decisions", f"id {r[0]}", exc)
            return None
        return decision

    def _loaded_outcome(self, r: tuple) -> tuple[Decision, float] | None:
        """(decision, loss) of an observed decision: the decisions row, then the loss."""
        decision = self._loaded_decision(r[:-1])
        if decision is None:
            return None
        try:
            loss = check_finite(r[-1], f"loss of decision {r[0]}", minimum=0.0, maximum=1.0)
        except InvalidInput as exc:
            self._skipped("outcomes", f"of decision id {r[0]}", exc)
            return None
        return decision, float(loss)

    def _loaded_class(self, conn: sqlite3.Connection, job_class: str, text: str) -> ClassState | None:
        try:
            state = self._class_from_row(job_class, text)
            self._class_row(state)
            return state
        except InvalidInput as exc:
            damage = exc
        # The class goes on from its last closed round: a fresh state would number its rounds
        # from 1 again and write them over the intact weight_history rows of the old ones.
        state = self._class_from_history(conn, job_class)
        self._skipped("classes", f"{job_class!r}", damage,
                      f"; the class goes on from round {state.rounds} of weight_history "
                      "(its open round's risks and its regret sums start at 0)" if state else
                      "; the class starts again from equal weights (no closed round of it is "
                      "readable in weight_history)")
        return state

    def _class_from_history(self, conn: sqlite3.Connection, job_class: str) -> ClassState | None:
        """A class state rebuilt from the class's last weight_history row and the expert
        names of its last decision; None when they cannot be read."""
        last = conn.execute("SELECT round, time, gamma, weights_after FROM weight_history "
                            "WHERE job_class = ? ORDER BY round DESC LIMIT 1", (job_class,)).fetchone()
        names = conn.execute("SELECT expert_names FROM decisions WHERE job_class = ? "
                             "ORDER BY id DESC LIMIT 1", (job_class,)).fetchone()
        if last is None or names is None:
            return None
        try:
            rounds, at, gamma, weights = last
            names = _list(_loads(names[0], "expert names", self.path), "expert names")
            weights = [float(w) for w in _list(_loads(weights, "weights after", self.path), "weights after")]
            n = len(names)
            state = ClassState.fresh(job_class, names)
            state.weights, state.rounds, state.last_update, state.last_gamma = weights, rounds, at, gamma
            state.decisions, state.observations = conn.execute(
                "SELECT COUNT(*), COUNT(o.decision_id) FROM decisions d LEFT JOIN outcomes o "
                "ON o.decision_id = d.id AND o.kind != 'cancelled' WHERE d.job_class = ?",
                (job_class,)).fetchone()
            if len(weights) != n:
                raise InvalidInput(f"{len(weights)} weights for {n} experts")
            self._class_row(state)
            return ClassState.from_dict(state.to_dict())
        except (InvalidInput, TypeError, ValueError):
            return None
