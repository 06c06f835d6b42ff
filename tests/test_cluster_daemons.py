"""The local Slurm cluster's daemons are known by pid and start: a live daemon must not be
taken for dead when the clock moves, and a later process given its number is not it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from slurm_plugin.daemons import Daemon, _spawn, _stop


@pytest.fixture
def sleeper(tmp_path: Path):
    d = _spawn("slurmd", "n1", [sys.executable, "-c", "import time; time.sleep(60)"],
               tmp_path / "n1.log")
    yield d
    _stop(d, grace_s=2.0)


def test_a_daemon_stays_alive_when_the_boot_time_moves_by_a_second(sleeper):
    # /proc/stat's btime is whole seconds from the wall clock: after an adjustment every
    # epoch start time reads a second off. Seen in CI: `status` said a live cluster was down.
    moved = dataclasses.replace(sleeper, create_time=sleeper.create_time + 1.0)
    assert sleeper.start_ticks is not None
    assert moved.alive()


def test_a_later_process_with_the_daemons_number_is_not_the_daemon(sleeper):
    other = dataclasses.replace(sleeper, start_ticks=sleeper.start_ticks - 100)
    assert not other.alive()


def test_a_state_file_without_start_ticks_still_tells_a_later_process(sleeper):
    old = dataclasses.replace(sleeper, start_ticks=None)
    assert old.alive()
    assert dataclasses.replace(old, create_time=old.create_time + 1.0).alive()
    assert not dataclasses.replace(old, create_time=old.create_time - 30.0).alive()


def test_the_start_ticks_are_kept_in_the_cluster_state(sleeper):
    saved = json.loads(json.dumps(dataclasses.asdict(sleeper)))   # as in cluster.json
    back = Daemon(**saved)
    assert back.start_ticks == sleeper.start_ticks and back.alive()
    del saved["start_ticks"]                                   # a state file written before
    assert Daemon(**saved).start_ticks is None and Daemon(**saved).alive()
