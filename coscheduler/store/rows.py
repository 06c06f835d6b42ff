"""Rows of the state database <-> the learner's records (decisions, outcomes, rounds,
class states): the checks a row passes before it is written, and what a read row must be.

A mixin of ``SqliteStore`` (it reads only ``self.path``, for the messages).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Sequence

from .. import boundedjson
from ..learner import ClassState, Decision, RoundClosed
from ..learner.experts import HostState
from ..model import InvalidInput, check_finite, validate_job_class, validate_job_id
from ..recorder import LOSS_KINDS, OutcomeRecord
from .errors import StoreError


# What json.dumps(value, allow_nan=False, separators=(",", ":")) builds on every call, once:
# a decision row holds five JSON texts, a pass writes hundreds of rows.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def _dumps(value: object, what: str) -> str:
    try:
        return _ENCODER.encode(value)
    except ValueError:
        raise InvalidInput(f"{what} holds a NaN or infinite number: {value!r}") from None


def _loads(text: str, what: str, path: Path) -> object:
    # Bounded: a column edited to 100,000 nested brackets is a StoreError naming the row,
    # not a RecursionError in json.loads.
    if not isinstance(text, (str, bytes)):
        raise StoreError(f"{path}: {what} is not valid JSON (a {type(text).__name__}, not text)")
    try:
        return boundedjson.loads(text, what=what)
    except boundedjson.JSONUnusable as exc:    # (its message starts with ``what``)
        raise StoreError(f"{path}: {exc}") from None


def _list(value: object, what: str) -> list:
    """A JSON column that must hold a list (a text "abcdef" would read as six letters)."""
    if not isinstance(value, list):
        raise InvalidInput(f"{what} must be a list, got {type(value).__name__}")
    return value


def _floats(value: object, what: str) -> tuple[float, ...]:
    """A list of numbers as floats, or InvalidInput naming the field."""
    items = _list(value, what)
    try:
        # (map, not a generator: a restart reads thousands of these rows)
        return tuple(map(float, items))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what}: {exc}") from None


def _quota(value: float, name: str) -> float:
    v = check_finite(value, name, minimum=0.0, maximum=1.0)
    assert v is not None
    return v


def _check_decision_types(d: Decision) -> None:
    """What ``_decision_row`` takes for granted of a Decision the learner built, and a row
    read from the file need not hold: an integer action, text names."""
    where = f"decision {d.decision_id}"
    if isinstance(d.action_index, bool) or not isinstance(d.action_index, int):
        raise InvalidInput(f"{where}: action index must be an integer, got {d.action_index!r}")
    if not isinstance(d.policy, str):
        raise InvalidInput(f"{where}: policy must be text, got {d.policy!r}")
    if not all(isinstance(n, str) for n in d.expert_names):
        raise InvalidInput(f"{where}: expert names must be text, got {list(d.expert_names)!r}")


class RowsMixin:
    """Record -> row (checked) and row -> record, for ``SqliteStore``."""

    path: Path

    # -- rows <-> records ----------------------------------------------------------------------
    @staticmethod
    def _check_decision(d: Decision) -> str:
        """The checks of a decision besides its JSON columns' numbers; returns "decision N"."""
        if not isinstance(d, Decision):
            raise InvalidInput(f"expected a Decision, got {type(d).__name__}")
        if isinstance(d.decision_id, bool) or not isinstance(d.decision_id, int) or d.decision_id < 1:
            raise InvalidInput(f"decision id must be an integer >= 1, got {d.decision_id!r}")
        where = f"decision {d.decision_id}"
        validate_job_id(d.host_job, f"{where}: host_job")
        validate_job_id(d.guest_job, f"{where}: guest_job")
        validate_job_class(d.job_class)
        check_finite(d.time, f"{where}: time", minimum=0.0)
        n, m = len(d.expert_names), len(d.mixture)
        if len(d.expert_dists) != n or len(d.weights) != n or any(len(p) != m for p in d.expert_dists):
            raise InvalidInput(f"{where}: {n} experts, {len(d.weights)} weights and "
                               f"{len(d.expert_dists)} distributions do not line up")
        if not 0 <= d.action_index < m:
            raise InvalidInput(f"{where}: action index {d.action_index} outside 0..{m - 1}")
        check_finite(d.action_fraction, f"{where}: action fraction", minimum=0.0, maximum=1.0)
        return where

    def _check_read_decision(self, d: Decision) -> None:
        """What ``_decision_row`` checks, for a decision read back (a restart reads thousands:
        the numbers are tested, not written out as JSON again)."""
        _check_decision_types(d)
        where = self._check_decision(d)
        for what, values in (("weights", d.weights), ("mixture", d.mixture),
                             *(("expert distributions", p) for p in d.expert_dists)):
            if not all(map(math.isfinite, values)):
                raise InvalidInput(f"{where}: {what} holds a NaN or infinite number: {list(values)!r}")

    def _decision_row(self, d: Decision, host_quota: float, guest_quota: float) -> tuple:
        where = self._check_decision(d)
        return (
            d.decision_id, float(d.time), d.host_job, d.guest_job, d.job_class, d.policy,
            _dumps(d.state.to_dict(), f"{where}: host state"), _dumps(list(d.expert_names), where),
            _dumps([list(p) for p in d.expert_dists], f"{where}: expert distributions"),
            _dumps(list(d.weights), f"{where}: weights"), _dumps(list(d.mixture), f"{where}: mixture"),
            int(d.action_index), check_finite(d.action_fraction, f"{where}: action fraction", minimum=0.0, maximum=1.0),
            _quota(host_quota, f"{where}: host quota"), _quota(guest_quota, f"{where}: guest quota"),
        )

    def _decision_from_row(self, r: Sequence) -> Decision:
        what = f"decision {r[0]}"
        try:
            return Decision(
                decision_id=r[0], time=r[1], host_job=r[2], guest_job=r[3], job_class=r[4], policy=r[5],
                state=HostState.from_dict(_loads(r[6], f"{what}: state", self.path)),
                expert_names=tuple(_list(_loads(r[7], f"{what}: expert names", self.path),
                                         f"{what}: expert names")),
                expert_dists=tuple(_floats(p, f"{what}: expert distributions") for p in
                                   _list(_loads(r[8], f"{what}: expert distributions", self.path),
                                         f"{what}: expert distributions")),
                weights=_floats(_loads(r[9], f"{what}: weights", self.path), f"{what}: weights"),
                mixture=_floats(_loads(r[10], f"{what}: mixture", self.path), f"{what}: mixture"),
                action_index=r[11], action_fraction=r[12],
            )
        except StoreError:
            raise
        except (InvalidInput, TypeError, ValueError) as exc:
            raise StoreError(f"{self.path}: {what} is not a valid record: {exc}") from None

    def _outcome_row(self, o: OutcomeRecord) -> tuple:
        if not isinstance(o, OutcomeRecord):
            raise InvalidInput(f"expected an OutcomeRecord, got {type(o).__name__}")
        where = f"outcome of decision {o.decision_id}"
        if o.kind not in LOSS_KINDS:
            raise InvalidInput(f"{where}: kind must be one of {LOSS_KINDS}, got {o.kind!r}")
        return (
            int(o.decision_id), check_finite(o.time, f"{where}: time", minimum=0.0),
            check_finite(o.loss, f"{where}: loss", minimum=0.0, maximum=1.0), o.kind,
            check_finite(o.host_runtime_s, f"{where}: host runtime", minimum=0.0, allow_none=True),
            check_finite(o.host_walltime_s, f"{where}: host walltime", minimum=0.0, allow_none=True),
            check_finite(o.guest_runtime_s, f"{where}: guest runtime", minimum=0.0, allow_none=True),
            str(o.note),
        )

    def _insert_outcome(self, conn: sqlite3.Connection, o: OutcomeRecord, row: tuple) -> str:
        """Insert an outcome row; returns the decision's class."""
        found = conn.execute("SELECT job_class FROM decisions WHERE id = ?", (o.decision_id,)).fetchone()
        if found is None:
            raise InvalidInput(f"outcome for unknown decision id {o.decision_id} (not in {self.path})")
        if conn.execute("SELECT 1 FROM outcomes WHERE decision_id = ?", (o.decision_id,)).fetchone():
            raise InvalidInput(f"decision {o.decision_id} already has an outcome in {self.path}")
        conn.execute("INSERT INTO outcomes (decision_id, time, loss, kind, host_runtime_s, "
                     "host_walltime_s, guest_runtime_s, note) VALUES (?,?,?,?,?,?,?,?)", row)
        return found[0]

    def _round_row(self, c: RoundClosed) -> tuple:
        where = f"round {c.round} of class {c.job_class}"
        validate_job_class(c.job_class)
        if isinstance(c.round, bool) or not isinstance(c.round, int) or c.round < 1:
            raise InvalidInput(f"{where}: round must be an integer >= 1")
        return (c.job_class, c.round, check_finite(c.time, f"{where}: time", minimum=0.0),
                check_finite(c.gamma, f"{where}: gamma", minimum=0.0),
                _dumps(list(c.risk), f"{where}: risk"),
                _dumps(list(c.weights_before), f"{where}: weights before"),
                _dumps(list(c.weights_after), f"{where}: weights after"))

    @staticmethod
    def _insert_round(conn: sqlite3.Connection, row: tuple) -> None:
        # REPLACE: a round recorded without its class state (two separate calls, killed in
        # between) is closed again after the restart; the class state is the truth.
        conn.execute("INSERT OR REPLACE INTO weight_history VALUES (?,?,?,?,?,?,?)", row)

    def _class_row(self, state: ClassState) -> tuple:
        if not isinstance(state, ClassState):
            raise InvalidInput(f"expected a ClassState, got {type(state).__name__}")
        d = state.to_dict()
        ClassState.from_dict(d)  # the same checks a load will make: refuse now, not at restart
        last = check_finite(state.last_update, f"class {state.job_class}: last update", allow_none=True)
        return (state.job_class, _dumps(d, f"class {state.job_class}"), int(state.rounds), last, time.time())

    @staticmethod
    def _upsert_class(conn: sqlite3.Connection, row: tuple) -> None:
        conn.execute(
            "INSERT INTO classes (job_class, state, rounds, last_update, saved_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT (job_class) DO UPDATE SET state = excluded.state, rounds = excluded.rounds, "
            "last_update = excluded.last_update, saved_at = excluded.saved_at", row)

    def _class_from_row(self, job_class: str, text: str) -> ClassState:
        d = _loads(text, f"class {job_class}", self.path)
        try:
            if not isinstance(d, dict):
                raise InvalidInput("not an object")
            return ClassState.from_dict(d)
        except InvalidInput as exc:
            raise StoreError(f"{self.path}: saved state of class {job_class!r} is not valid: {exc}") from None


_DECISION_COLS = ("d.id, d.time, d.host_job, d.guest_job, d.job_class, d.policy, d.state, d.expert_names, "
                  "d.expert_dists, d.weights, d.mixture, d.action_index, d.action_fraction")
