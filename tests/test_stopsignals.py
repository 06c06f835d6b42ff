"""Which signals stop the project's long-running processes (coscheduler/stopsignals.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

PROBE = ("import json; from coscheduler.stopsignals import stop_on_signals; "
         "print(json.dumps(sorted(int(s) for s in stop_on_signals(lambda *a: None))))")


def _handled(ignore_hup: bool) -> list[int]:
    # (set either way: this test may itself run under nohup, as CI's runner does)
    hup = signal.SIG_IGN if ignore_hup else signal.SIG_DFL
    pre = lambda: signal.signal(signal.SIGHUP, hup)  # noqa: E731
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         preexec_fn=pre, timeout=60, check=True).stdout
    return json.loads(out)


def test_sighup_stops_cleanly_unless_it_was_ignored_at_start_as_nohup_does():
    """A closed terminal's SIGHUP ended the agent and the controller at once (quotas left
    in the kernel): it now stops them cleanly. Started under nohup (SIGHUP ignored), a
    process stays ignoring it, as whoever started it asked."""
    stop = sorted(int(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    assert _handled(ignore_hup=False) == stop
    assert _handled(ignore_hup=True) == sorted(int(s) for s in (signal.SIGTERM, signal.SIGINT))
