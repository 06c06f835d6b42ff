"""Read-side queries the operator CLI needs: plain records out of one read snapshot each.

Every row read here passes the checks its write passed (``RowsMixin._decision_row``,
``_round_row``, ``_class_row``, ``check_finite``) before it is shown: a row damaged or edited
in the file is a StoreError naming the file, the row and the field, which the CLI prints as
one line, never a traceback or a silently wrong table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..learner import ClassState, Decision, RoundClosed
from ..recorder import OutcomeRecord
from ..model import InvalidInput, check_finite, validate_job_class, validate_job_id
from .errors import StoreError
from .rows import _check_decision_types, _loads, _quota
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
    states = [store._class_from_row(k, text) for k, text in rows]
    for st in states:
        try:
            store._class_row(st)   # the write checks: a NaN risk, a text last update
        except InvalidInput as exc:
            raise StoreError(f"{store.path}: saved state of class {st.job_class!r} is not "
                             f"valid: {exc}") from None
    return states


def class_names(store: SqliteStore) -> list[str]:
    with store.reading("list the classes") as conn:
        return [r[0] for r in conn.execute("SELECT job_class FROM classes ORDER BY job_class")]


def _numbers(value: object, what: str) -> tuple[float, ...]:
    """A JSON column that must hold a list of finite numbers (risk, weights)."""
    if not isinstance(value, list):
        raise InvalidInput(f"{what} must be a list of numbers, got {type(value).__name__}")
    return tuple(_finite(x, what) for x in value)


def _finite(value: object, name: str, **bounds: float) -> float:
    """``check_finite`` for a value that may not be None."""
    v = check_finite(value, name, **bounds)   # type: ignore[arg-type]
    assert v is not None
    return v


def weight_history(store: SqliteStore, job_class: str) -> list[RoundClosed]:
    """The class's closed rounds, oldest first."""
    with store.reading(f"read the weight history of class {job_class}") as conn:
        rows = conn.execute(
            "SELECT round, time, gamma, risk, weights_before, weights_after FROM weight_history "
            "WHERE job_class = ? ORDER BY round", (job_class,)).fetchall()
    out = []
    for rnd, t, gamma, risk, before, after in rows:
        what = f"round {rnd} of class {job_class}"
        try:
            vectors = [_numbers(_loads(text, f"{what}: {name}", store.path), f"{what}: {name}")
                       for name, text in (("risk", risk), ("weights before", before),
                                          ("weights after", after))]
            if len({len(v) for v in vectors}) != 1:
                raise InvalidInput(f"{what}: risk, weights before and weights after have "
                                   f"{', '.join(str(len(v)) for v in vectors)} entries")
            closed = RoundClosed(job_class, rnd, t, gamma, *vectors)
            store._round_row(closed)    # the write checks: round >= 1, finite time and gamma
        except StoreError:
            raise
        except InvalidInput as exc:
            raise StoreError(f"{store.path}: {what} is not a valid record: {exc}") from None
        out.append(closed)
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
    return [_list_row(store, r) for r in reversed(rows)]


def _list_row(store: SqliteStore, r: Sequence) -> DecisionRow:
    """A ``decisions list`` row, through the checks ``_decision_row`` made when it was written."""
    where = f"decision {r[0]}"
    try:
        return DecisionRow(
            decision_id=r[0],
            time=_finite(r[1], f"{where}: time", minimum=0.0),
            host_job=validate_job_id(r[2], f"{where}: host_job"),
            guest_job=validate_job_id(r[3], f"{where}: guest_job"),
            job_class=validate_job_class(r[4]),
            action_fraction=_finite(r[5], f"{where}: action fraction", minimum=0.0, maximum=1.0),
            loss=check_finite(r[6], f"outcome of {where}: loss", minimum=0.0, maximum=1.0,
                              allow_none=True),
        )
    except InvalidInput as exc:
        raise StoreError(f"{store.path}: {where} is not a valid record: {exc}") from None


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
    # (a NaN or text quota, a loss out of range, a time of 1e999, ragged distributions, an
    # empty mixture) is named, not printed as a traceback or a wrong table.
    try:
        host_quota = _quota(row[-2], f"decision {decision_id}: host quota")
        guest_quota = _quota(row[-1], f"decision {decision_id}: guest quota")
        _check_decision_types(decision)
        store._decision_row(decision, host_quota, guest_quota)
        outcome = None
        if out is not None:
            outcome = OutcomeRecord(*out)
            store._outcome_row(outcome)
            if not isinstance(outcome.note, str):
                raise InvalidInput(f"outcome of decision {decision_id}: note is not text")
    except (InvalidInput, TypeError, ValueError) as exc:
        raise StoreError(f"{store.path}: decision {decision_id} is not a valid record: {exc}") from None
    return DecisionDetail(decision, host_quota, guest_quota, outcome)
