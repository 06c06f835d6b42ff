"""Where the state database lives unless told otherwise."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "COSCHED_DB"
SYSTEM_PATH = Path("/var/lib/coscheduler/state.db")


def default_db_path() -> Path:
    """$COSCHED_DB if set, else /var/lib/coscheduler/state.db for root, else
    ~/.local/state/coscheduler/state.db."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    if os.geteuid() == 0:
        return SYSTEM_PATH
    return Path.home() / ".local" / "state" / "coscheduler" / "state.db"
