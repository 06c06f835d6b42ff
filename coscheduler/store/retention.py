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
alone runtimes are kept.

``prune_candidates`` finds them (one read); ``delete_decisions`` deletes a part of them in
the caller's write transaction, so that ``SqliteStore.prune`` can delete in short ones.
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
