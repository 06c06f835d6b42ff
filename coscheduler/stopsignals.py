"""The signals that stop a long-running process of the project cleanly (the node agent, the
controller, the Mesos emulator): SIGTERM, SIGINT, and SIGHUP, whose default action (a closed
terminal, a log rotator's ``kill -HUP``) ended the process at once and left the quotas it
had written in the kernel. A SIGHUP ignored when the process started (``nohup``) stays
ignored: whoever started it that way asked for it to outlive its terminal."""

from __future__ import annotations

import signal
from typing import Callable


def stop_on_signals(handler: Callable[[int, object], None]) -> list[int]:
    """Install ``handler(signum, frame)`` for the stop signals; returns those it handles."""
    handled = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        signal.signal(signum, handler)
        handled.append(signum)
    return handled


__all__ = ["stop_on_signals"]
