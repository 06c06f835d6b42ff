"""Retention: the state database's old decisions let go, without changing what a restart
rebuilds.

The database grows by about 2 KB per decision; a busy site makes thousands a day. ``prune``
deletes the decisions whose outcome was recorded before a time, with their outcomes, except

- pending decisions (no outcome yet: the learner waits for them),
- each class's most recent ``keep_per_class`` observed ones (at least what a restart needs
  to recall the fitted experts, ``AsaxLearner.recall_window()``),

and counts the observed outcomes it deleted per class in the ``meta`` table
(``pruned_observed:CLASS``): ``load()`` adds them to ``observed_counts``, so a recalled
expert follows the same refit schedule as before the prune. Walltime credits of a deleted
decision keep their row, with no decision. Class states, rounds (the weight history) and
alone runtimes are kept, except those of the classes a bounded learner no longer holds:

- ``forgotten_classes``: saved classes past ``LearnerConfig.max_classes`` that a restart
  would not read (``recorder.classes_kept``: not among those updated last, no decision
  pending) and that saw nothing since ``before``. ``delete_classes`` deletes such a class
  whole: its state, its rounds, every decision and outcome of it, its pruned count. A
  restart never read them (``SqliteStore.load(max_classes=...)``), so it rebuilds the same
  learner; a class that comes back starts afresh, as it would have anyway.

``prune_candidates`` finds them (one read); ``delete_decisions`` deletes a part of them in
the caller's write transaction, so that ``SqliteStore.prune`` can delete in short ones
(``delete_classes`` likewise, checking again in that transaction that each class is still
forgotten: a running controller may have used it since).
"""

from __future__ import annotations

import sqlite3

from ..model import InvalidInput

PRUNED_PREFIX = "pruned_observed:"


def pruned_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Observed outcomes deleted so far, per class."""
    return {key[len(PRUNED_PREFIX):]: int(value) for key, value in conn.execute(
        "SELECT key, value FROM meta WHERE key LIKE ?", (PRUNED_PREFIX + "%",))}


def prune_candidates(conn: sqlite3.Connection, before: float, keep_per_class: int
                     ) -> list[tuple[int, str, bool]]:
    """(decision id, class, cancelled) of what the module doc says may go, oldest first.
    Still true later: newer outcomes only push these further from their class's newest."""
    if isinstance(keep_per_class, bool) or not isinstance(keep_per_class, int) or keep_per_class < 0:
        raise InvalidInput(f"keep_per_class must be an integer >= 0, got {keep_per_class!r}")
    # Each class's observed outcomes ranked newest first; cancelled ones are never recalled.
    return [(int(i), c, bool(x)) for i, c, x in conn.execute(
        "SELECT id, job_class, cancelled FROM (SELECT d.id, d.job_class, o.time, o.seq, "
        "o.kind = 'cancelled' AS cancelled, ROW_NUMBER() OVER (PARTITION BY d.job_class, "
        "o.kind = 'cancelled' ORDER BY o.seq DESC) AS recent FROM outcomes o "
        "JOIN decisions d ON d.id = o.decision_id) "
        "WHERE time < ? AND (cancelled OR recent > ?) ORDER BY seq",
        (float(before), keep_per_class))]


def delete_decisions(conn: sqlite3.Connection, rows: list[tuple[int, str, bool]]
                     ) -> dict[str, int]:
    """Delete these decisions and their outcomes (inside the caller's write transaction),
    adding the observed ones to their class's pruned count; the deleted per class."""
    # Only those still there (another prune may have run since they were found): each
    # deletion is counted once.
    there = set()
    for at in range(0, len(rows), 500):
        part = [r[0] for r in rows[at:at + 500]]
        there.update(i for (i,) in conn.execute(
            f"SELECT id FROM decisions WHERE id IN ({','.join('?' * len(part))})", part))
    rows = [r for r in rows if r[0] in there]
    deleted: dict[str, int] = {}
    observed: dict[str, int] = {}
    for _, job_class, cancelled in rows:
        deleted[job_class] = deleted.get(job_class, 0) + 1
        if not cancelled:
            observed[job_class] = observed.get(job_class, 0) + 1
    ids = [(r[0],) for r in rows]
    conn.executemany("UPDATE walltime_credits SET decision_id = NULL WHERE decision_id = ?", ids)
    conn.executemany("DELETE FROM outcomes WHERE decision_id = ?", ids)
    conn.executemany("DELETE FROM decisions WHERE id = ?", ids)
    before_counts = pruned_counts(conn)
    for job_class, n in observed.items():
        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                     "SET value = excluded.value",
                     (PRUNED_PREFIX + job_class, str(before_counts.get(job_class, 0) + n)))
    return deleted


# recorder.classes_kept in SQL, as SqliteStore.load reads it: the newest max_classes by last
# update (ties to the later name) and every class with a decision pending.
_KEPT_SQL = ("SELECT job_class FROM (SELECT job_class FROM classes "
             "ORDER BY COALESCE(last_update, 0) DESC, job_class DESC LIMIT ?) "
             "UNION SELECT d.job_class FROM decisions d WHERE NOT EXISTS "
             "(SELECT 1 FROM outcomes o WHERE o.decision_id = d.id)")
_QUIET_SQL = ("COALESCE(last_update, 0) < ? AND NOT EXISTS (SELECT 1 FROM decisions d "
              "WHERE d.job_class = c.job_class AND d.time >= ?)")


def _check_bound(max_classes: int) -> None:
    if isinstance(max_classes, bool) or not isinstance(max_classes, int) or max_classes < 1:
        raise InvalidInput(f"max_classes must be an integer >= 1, got {max_classes!r}")


def forgotten_classes(conn: sqlite3.Connection, before: float, max_classes: int) -> list[str]:
    """Saved classes a learner bounded to ``max_classes`` does not hold, last updated before
    ``before`` and with no decision at or after it (the module doc), by name."""
    _check_bound(max_classes)
    if conn.execute("SELECT COUNT(*) FROM classes").fetchone()[0] <= max_classes:
        return []
    return [c for (c,) in conn.execute(
        f"SELECT job_class FROM classes c WHERE job_class NOT IN ({_KEPT_SQL}) AND {_QUIET_SQL} "
        "ORDER BY job_class", (int(max_classes), float(before), float(before)))]


def _still_forgotten(conn: sqlite3.Connection, classes: list[str], before: float,
                     max_classes: int) -> list[str]:
    """Those of ``classes`` that ``forgotten_classes`` would still list, checked one by one
    (its whole query reads every pending decision: too much for every chunk of a prune)."""
    last = conn.execute("SELECT COALESCE(last_update, 0), job_class FROM classes "
                        "ORDER BY COALESCE(last_update, 0) DESC, job_class DESC LIMIT 1 OFFSET ?",
                        (int(max_classes) - 1,)).fetchone()
    if last is None:     # (no more classes than the bound now)
        return []
    out = []
    for c in classes:
        row = conn.execute(
            f"SELECT COALESCE(last_update, 0), job_class FROM classes c "
            f"WHERE job_class = ? AND {_QUIET_SQL} AND NOT EXISTS (SELECT 1 FROM decisions d "
            "WHERE d.job_class = c.job_class AND NOT EXISTS "
            "(SELECT 1 FROM outcomes o WHERE o.decision_id = d.id))",
            (c, float(before), float(before))).fetchone()
        if row is not None and (row[0], row[1]) < (last[0], last[1]):
            out.append(c)    # (ranked after the newest max_classes: not held)
    return out


def delete_classes(conn: sqlite3.Connection, classes: list[str], before: float,
                   max_classes: int) -> dict[str, int]:
    """Delete these classes whole (inside the caller's write transaction), those still
    forgotten now (a running controller may have used one since they were found); per
    class deleted, the decisions deleted with it (0 for a class that had none)."""
    _check_bound(max_classes)
    deleted: dict[str, int] = {}
    for c in _still_forgotten(conn, classes, before, max_classes):
        ids = [(i,) for (i,) in conn.execute("SELECT id FROM decisions WHERE job_class = ?", (c,))]
        conn.executemany("UPDATE walltime_credits SET decision_id = NULL WHERE decision_id = ?", ids)
        conn.executemany("DELETE FROM outcomes WHERE decision_id = ?", ids)
        conn.execute("DELETE FROM decisions WHERE job_class = ?", (c,))
        conn.execute("DELETE FROM weight_history WHERE job_class = ?", (c,))
        conn.execute("DELETE FROM classes WHERE job_class = ?", (c,))
        conn.execute("DELETE FROM meta WHERE key = ?", (PRUNED_PREFIX + c,))
        deleted[c] = len(ids)
    return deleted
