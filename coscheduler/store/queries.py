"""Read-side queries the operator CLI needs: plain records out of one read snapshot each."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..learner import ClassState, Decision, RoundClosed
from ..recorder import OutcomeRecord
from ..model import InvalidInput
from .errors import StoreError
from .rows import _quota
from .sqlite import _DECISION_COLS, SqliteStore


@dataclass(frozen=True)
class DecisionRow:
    """One line of ``cosched decisions list``."""

    decision_id: int
    time: float
    host_job: str
    guest_job: str
    job_class: str
    action_fraction: float
    loss: float | None          # None until the outcome is known


@dataclass(frozen=True)
class DecisionDetail:
    """Everything known about one decision."""

    decision: Decision
    host_quota: float
    guest_quota: float
    outcome: OutcomeRecord | None


def class_states(store: SqliteStore, job_class: str | None = None) -> list[ClassState]:
    """Saved class states, by class name; only ``job_class`` if given (empty if unknown)."""
    sql = "SELECT job_class, state FROM classes"
    args: tuple = ()
    if job_class is not None:
        sql += " WHERE job_class = ?"
        args = (job_class,)
    with store.reading("read the class states") as conn:
        rows = conn.execute(sql + " ORDER BY job_class", args).fetchall()
    return [store._class_from_row(k, text) for k, text in rows]


def class_names(store: SqliteStore) -> list[str]:
    with store.reading("list the classes") as conn:
        return [r[0] for r in conn.execute("SELECT job_class FROM classes ORDER BY job_class")]


def weight_history(store: SqliteStore, job_class: str) -> list[RoundClosed]:
    """The class's closed rounds, oldest first."""
    with store.reading(f"read the weight history of class {job_class}") as conn:
        rows = conn.execute(
            "SELECT round, time, gamma, risk, weights_before, weights_after FROM weight_history "
            "WHERE job_class = ? ORDER BY round", (job_class,)).fetchall()
    out = []
    for rnd, t, gamma, risk, before, after in rows:
        try:
            out.append(RoundClosed(job_class, rnd, t, gamma, tuple(json.loads(risk)),
                                   tuple(json.loads(before)), tuple(json.loads(after))))
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{store.path}: round {rnd} of class {job_class} is not valid: {exc}") from None
    return out


def recent_decisions(store: SqliteStore, last: int, job_class: str | None = None) -> list[DecisionRow]:
    """The ``last`` most recent decisions (by id), oldest first, with their loss if known."""
    where, args = "", ()
    if job_class is not None:
        where, args = "WHERE d.job_class = ?", (job_class,)
    with store.reading("list decisions") as conn:
        rows = conn.execute(
            "SELECT d.id, d.time, d.host_job, d.guest_job, d.job_class, d.action_fraction, o.loss "
            f"FROM decisions d LEFT JOIN outcomes o ON o.decision_id = d.id {where} "
            "ORDER BY d.id DESC LIMIT ?", args + (int(last),)).fetchall()
    return [DecisionRow(*r) for r in reversed(rows)]


def decision_count(store: SqliteStore) -> int:
    with store.reading("count decisions") as conn:
        return conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]


def decision_detail(store: SqliteStore, decision_id: int) -> DecisionDetail | None:
    """One decision with its quotas and outcome; None if the id is unknown."""
    with store.reading(f"read decision {decision_id}") as conn:
        row = conn.execute(f"SELECT {_DECISION_COLS}, d.host_quota, d.guest_quota FROM decisions d "
                           "WHERE d.id = ?", (decision_id,)).fetchone()
        if row is None:
            return None
        out = conn.execute("SELECT decision_id, time, loss, kind, host_runtime_s, host_walltime_s, "
                           "guest_runtime_s, note FROM outcomes WHERE decision_id = ?",
                           (decision_id,)).fetchone()
    decision = store._decision_from_row(row[:-2])
    # Read back through the checks every write passes: a row damaged or edited in the file
    # (a NaN or text quota, a loss out of range) is named, not printed as a traceback.
    try:
        host_quota = _quota(row[-2], f"decision {decision_id}: host quota")
        guest_quota = _quota(row[-1], f"decision {decision_id}: guest quota")
        outcome = None
        if out is not None:
            outcome = OutcomeRecord(*out)
            store._outcome_row(outcome)
    except (InvalidInput, TypeError, ValueError) as exc:
        raise StoreError(f"{store.path}: decision {decision_id} is not a valid record: {exc}") from None
    return DecisionDetail(decision, host_quota, guest_quota, outcome)
