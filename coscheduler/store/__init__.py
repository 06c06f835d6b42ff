"""The learner's persistent state: an SQLite file (stdlib, WAL) with a versioned schema.

``SqliteStore`` implements ``coscheduler.recorder.Recorder``; ``queries`` holds the
read-side queries of the operator CLI; ``default_db_path`` says where the file lives.
"""

from .errors import (DamagedDatabase, ForeignDatabase, MissingStateDatabase, NewerSchema,
                     NotAStateDatabase, OlderSchema, StoreError, StoreUnavailable)
from .lock import DatabaseInUse
from .paths import default_db_path
from .schema import APPLICATION_ID, SCHEMA_VERSION
from .sqlite import SqliteStore

__all__ = [
    "APPLICATION_ID", "DamagedDatabase", "DatabaseInUse", "ForeignDatabase", "MissingStateDatabase", "NewerSchema",
    "NotAStateDatabase", "OlderSchema", "SCHEMA_VERSION", "SqliteStore", "StoreError", "StoreUnavailable",
    "default_db_path",
]
