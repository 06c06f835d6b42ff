"""Where the state database lives unless told otherwise."""

from __future__ import annotations

import os
from pathlib import Path

from ..model import InvalidInput

ENV_VAR = "COSCHED_DB"
SYSTEM_PATH = Path("/var/lib/coscheduler/state.db")


def expand_user(path: str | os.PathLike, where: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; InvalidInput naming ``where``
    when it cannot be (no such user, no home directory)."""
    try:
        return Path(path).expanduser()
    except RuntimeError as exc:
        raise InvalidInput(f"{where} {str(path)[:200]!r}: cannot expand '~' ({exc})") from None


def default_db_path() -> Path:
    """$COSCHED_DB if set, else /var/lib/coscheduler/state.db for root, else
    ~/.local/state/coscheduler/state.db."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return expand_user(env, f"${ENV_VAR}")
    if os.geteuid() == 0:
        return SYSTEM_PATH
    try:
        home = Path.home()
    except RuntimeError as exc:
        raise InvalidInput(f"no home directory for the state database ({exc}): set ${ENV_VAR} "
                           "or give --db") from None
    return home / ".local" / "state" / "coscheduler" / "state.db"
