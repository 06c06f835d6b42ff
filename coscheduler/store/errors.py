"""Errors of the state store. Each names the file and what was wrong with it.

They subclass ``InvalidInput`` (a broken or foreign state file is bad input), so the
controller and the CLI handle them like any other input they cannot use.
"""

from __future__ import annotations

from ..model import InvalidInput
from ..recorder import RecorderUnavailable


class StoreError(InvalidInput):
    """The state database cannot be used as asked; the message names the path."""


class MissingStateDatabase(StoreError):
    """No state database at the path, and the caller did not ask to create one."""


class NotAStateDatabase(StoreError):
    """The file is not SQLite, is damaged, or is an empty/uninitialised database."""


class ForeignDatabase(StoreError):
    """The file is an SQLite database of another program."""


class NewerSchema(StoreError):
    """The file was written by a newer coscheduler whose schema this code does not know."""


class OlderSchema(StoreError):
    """A read-only open met a schema that must be migrated first (reads never migrate)."""


class DamagedDatabase(StoreError):
    """A page of the file is damaged (SQLite: malformed / not a database); nothing more is
    written to it, and the message names the last good copy when there is one."""


class StoreUnavailable(StoreError, RecorderUnavailable):
    """A write could not be made now but may be later: the disk is full, an I/O error, or
    another writer held the database past the busy timeout. The record itself is good;
    the controller keeps it and writes it again at its next pass."""
