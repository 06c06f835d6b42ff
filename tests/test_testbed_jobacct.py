"""testbed.jobacct: a job's CPU time from the kernel (wait4 of its whole tree), its exit code,
and signals passed on to it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

BURN_IN_CHILD = ("import multiprocessing as mp, time\n"
                 "def burn():\n"
                 "    t = time.process_time()\n"
                 "    while time.process_time() - t < 0.4: pass\n"
                 "p = mp.get_context('fork').Process(target=burn); p.start(); p.join()\n")


def acct(tmp_path, *cmd):
    out = tmp_path / "acct" / "j.json"
    proc = subprocess.run([sys.executable, "-m", "testbed.jobacct", "--out", str(out), "--", *cmd],
                          capture_output=True, text=True, timeout=60)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_cpu_time_of_the_whole_tree_is_counted(tmp_path):
    proc, rec = acct(tmp_path, sys.executable, "-c", BURN_IN_CHILD)
    assert proc.returncode == 0, proc.stderr
    assert rec["exit_code"] == 0 and rec["signal"] is None
    assert rec["cpu_s"] >= 0.38            # the grandchild's 0.4 s included
    assert rec["end"] >= rec["start"]


def test_exit_code_is_passed_on(tmp_path):
    proc, rec = acct(tmp_path, sys.executable, "-c", "raise SystemExit(3)")
    assert proc.returncode == 3 and rec["exit_code"] == 3


def test_a_missing_program_is_exit_127_with_a_record(tmp_path):
    proc, rec = acct(tmp_path, "/nonexistent/prog")
    assert proc.returncode == 127 and "cannot run" in proc.stderr
    assert rec["exit_code"] == 127


def test_sigterm_reaches_the_command(tmp_path):
    out = tmp_path / "t.json"
    p = subprocess.Popen([sys.executable, "-m", "testbed.jobacct", "--out", str(out), "--",
                          sys.executable, "-c", "import time; time.sleep(30)"])
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 128 + signal.SIGTERM
    assert json.loads(out.read_text())["signal"] == signal.SIGTERM


def test_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "testbed.jobacct", "x"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
