"""The state database's schema, as numbered migrations.

Version k is reached from version k - 1 by running ``MIGRATIONS[k - 1]``; a fresh file is
version 0, so creating a database and upgrading an old one run the same code. The version
lives in the ``meta`` table (row ``schema_version``, mirrored in ``PRAGMA user_version``);
the file is marked as ours by ``PRAGMA application_id`` and the meta row ``app``.

To change the schema: append a migration, never edit a released one.
"""

from __future__ import annotations

# "CoSc" in ASCII: marks the file as a coscheduler state database (SQLite header bytes 68-71).
APPLICATION_ID = 0x436F5363
APP_NAME = "coscheduler"

# MIGRATIONS[i] takes the schema from version i to version i + 1.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE meta (
               key   TEXT PRIMARY KEY,
               value TEXT NOT NULL
           )""",
        # One row per job class: the learner's ClassState as JSON, plus the columns the
        # operator CLI sorts and filters on.
        """CREATE TABLE classes (
               job_class   TEXT PRIMARY KEY,
               state       TEXT NOT NULL,
               rounds      INTEGER NOT NULL,
               last_update REAL,
               saved_at    REAL NOT NULL
           )""",
        # One row per closed round (Algorithm 1's weight update): the weight trajectory.
        """CREATE TABLE weight_history (
               job_class      TEXT NOT NULL,
               round          INTEGER NOT NULL,
               time           REAL NOT NULL,
               gamma          REAL NOT NULL,
               risk           TEXT NOT NULL,
               weights_before TEXT NOT NULL,
               weights_after  TEXT NOT NULL,
               PRIMARY KEY (job_class, round)
           )""",
        """CREATE TABLE decisions (
               id              INTEGER PRIMARY KEY,
               time            REAL NOT NULL,
               host_job        TEXT NOT NULL,
               guest_job       TEXT NOT NULL,
               job_class       TEXT NOT NULL,
               policy          TEXT NOT NULL,
               state           TEXT NOT NULL,
               expert_names    TEXT NOT NULL,
               expert_dists    TEXT NOT NULL,
               weights         TEXT NOT NULL,
               mixture         TEXT NOT NULL,
               action_index    INTEGER NOT NULL,
               action_fraction REAL NOT NULL,
               host_quota      REAL NOT NULL,
               guest_quota     REAL NOT NULL
           )""",
        "CREATE INDEX decisions_by_class ON decisions (job_class, id)",
        # seq keeps the order in which losses were observed: fitted experts are re-taught
        # in that order after a restart, so they end up as they were.
        """CREATE TABLE outcomes (
               seq             INTEGER PRIMARY KEY AUTOINCREMENT,
               decision_id     INTEGER NOT NULL UNIQUE REFERENCES decisions (id),
               time            REAL NOT NULL,
               loss            REAL NOT NULL,
               kind            TEXT NOT NULL,
               host_runtime_s  REAL,
               host_walltime_s REAL,
               guest_runtime_s REAL,
               note            TEXT NOT NULL DEFAULT ''
           )""",
        """CREATE TABLE alone_runtimes (
               id        INTEGER PRIMARY KEY,
               job_class TEXT NOT NULL,
               runtime_s REAL NOT NULL,
               time      REAL NOT NULL
           )""",
        "CREATE INDEX alone_runtimes_by_class ON alone_runtimes (job_class)",
    ),
    # 2: walltime given back to a host that lent (slurm_plugin/walltime.py), kept with the
    # host's latest decision (NULL when the host had none recorded).
    (
        """CREATE TABLE walltime_credits (
               id            INTEGER PRIMARY KEY,
               decision_id   INTEGER REFERENCES decisions (id),
               job_id        TEXT NOT NULL,
               time          REAL NOT NULL,
               minutes       INTEGER NOT NULL,
               limit_s       REAL NOT NULL,
               projected_end REAL NOT NULL,
               capped        INTEGER NOT NULL DEFAULT 0
           )""",
        "CREATE INDEX walltime_credits_by_decision ON walltime_credits (decision_id)",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)

# The tables a version-1 file must have (checked on open, so a half-made file is refused).
REQUIRED_TABLES = frozenset({"meta", "classes", "weight_history", "decisions", "outcomes",
                             "alone_runtimes"})
