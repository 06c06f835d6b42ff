#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests need on a fresh
# machine, then runs the whole suite; as root the tests that need real cgroups and the live
# demo run too (they skip with a reason otherwise). Extra arguments go to pytest, e.g.
# `bash testbed/test.sh -m "not live" -x`.
#
# Python packages go into the project's own virtual environment (.venv at the top of the
# checkout), so this works on a stock distribution whose python3 refuses `pip install`
# outside one (PEP 668, "externally-managed-environment"). COSCHED_VENV picks another place.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${COSCHED_VENV:-$PWD/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    echo "test.sh: creating the virtual environment $venv" >&2
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        # A stock Debian/Ubuntu python3 has no ensurepip until python3-venv is installed.
        rm -rf "$venv"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "test.sh: installing python3-venv (python3 -m venv needs it)" >&2
            { apt-get install -y -q --no-install-recommends python3-venv >/dev/null 2>&1 \
              || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends python3-venv >/dev/null; }; } \
              && python3 -m venv "$venv"
        fi
        [ -x "$venv/bin/python" ] || {
            echo "test.sh: python3 -m venv failed; on Debian/Ubuntu install python3-venv first" >&2
            exit 1
        }
    fi
fi
# rl: JAX, optax, gymnasium, matplotlib, numba for the learned-scheduler tests (about 30 s, 0.6 GB
# before numba, which with llvmlite adds 0.2 GB);
# cluster: Dask distributed, for the sweep test on a local Dask cluster; ray: Ray, for the
# sweep test on a Ray head it starts on loopback (about 10 s to start here)
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test,rl,cluster,ray]'
# The Slurm tests (marker slurm) run a real Slurm 22.05 from Debian: install it when missing
# (about 6 s; `cosched slurm up` would do the same on first use).
# slurmrestd and the JWT plugin: tests/test_slurm_rest_live.py.
if [ "$(id -u)" = 0 ] && ! { command -v slurmctld && command -v slurmrestd; } >/dev/null 2>&1 \
        && command -v apt-get >/dev/null; then
    slurm_pkgs="slurm-wlm slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin"
    echo "test.sh: installing $slurm_pkgs" >&2
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
        --no-install-recommends $slurm_pkgs >/dev/null \
    || { apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null \
         && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
            --no-install-recommends $slurm_pkgs >/dev/null; }
fi
export PATH="$venv/bin:$PATH"
# The Docker testbed's tests (marker docker) need Debian's Docker engine, compose v1 and
# debootstrap: installed and started here when missing (as root; no systemd needed).
if [ "$(id -u)" = 0 ]; then
    "$venv/bin/python" -m testbed.engine ensure || echo "test.sh: no Docker engine (see above)" >&2
fi
# COSCHED_LINT=1 (.ci/run sets it): ruff, from the test extra, before the tests; its
# rules are pyproject.toml's [tool.ruff]. A finding fails the run before any test runs.
if [ "${COSCHED_LINT:-0}" = 1 ]; then
    "$venv/bin/ruff" check --no-cache . || { echo "test.sh: ruff found the problems above" >&2; exit 1; }
fi
status=0
# Where a CI run's time goes: each part's wall time, on stderr.
took() { echo "test.sh: $1 took $(( SECONDS - t_part )) s (exit $2)" >&2; t_part=$SECONDS; }
t_part=0
took "the set-up (packages, daemons, lint)" 0
if [ $# -gt 0 ]; then
    "$venv/bin/python" -m pytest "$@" || status=$?
    took "the tests" $status
else
    # The whole suite in two parts. The unmarked tests are pure and CPU-bound: they run on
    # up to 4 cores (pytest-xdist; 8 min serial, 4.5 min on this 2-core machine). The tests
    # that run real daemons, cgroups and workloads (markers root, slurm, docker, live,
    # mesos) measure CPU shares and wait on timers: they run one at a time, as before.
    # COSCHED_TEST_WORKERS sets the first part's processes (1: serial).
    marked="root or slurm or docker or live or mesos"
    workers="${COSCHED_TEST_WORKERS:-$("$venv/bin/python" -c \
        'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')}"
    case $workers in
        ''|*[!0-9]*|0) echo "test.sh: COSCHED_TEST_WORKERS must be a whole number >= 1, got '$workers'" >&2
                       exit 2;;
    esac
    if [ "$workers" -gt 1 ]; then xdist=(-n "$workers" --dist worksteal); else xdist=(); fi
    # (--durations: a CI log names its slowest tests)
    rc=0; "$venv/bin/python" -m pytest -m "not ($marked)" "${xdist[@]}" --durations=10 || rc=$?
    took "the unmarked tests ($workers processes)" $rc; [ $rc = 0 ] || status=$rc
    rc=0; "$venv/bin/python" -m pytest -m "$marked" --durations=10 || rc=$?
    took "the marked tests" $rc; [ $rc = 0 ] || status=1
fi
# The live Slurm tests again against the Slurm of other Debian releases (24.11 in trixie,
# 26.05 in sid), each in a container built offline (testbed/slurm_releases.sh; cached after
# the first run). They run after the whole suite when no pytest arguments were given, or
# when COSCHED_SLURM_RELEASES names the suites; COSCHED_SLURM_RELEASES=none leaves them out
# (said below, never counted as passed). A release that fails makes this command fail.
releases="${COSCHED_SLURM_RELEASES-}"
if [ -z "$releases" ] && [ $# -eq 0 ]; then releases="trixie sid"; fi
if [ "$releases" = none ]; then
    echo "test.sh: the Slurm releases in containers were left out (COSCHED_SLURM_RELEASES=none)" >&2
elif [ -n "$releases" ]; then
    if [ "$(id -u)" != 0 ]; then
        # like pytest's root-marked tests, which skip with their reason for other users
        echo "test.sh: SKIPPED the Slurm releases in containers (they need root)" >&2
    else
        # shellcheck disable=SC2086
        rc=0; COSCHED_PYTHON="$venv/bin/python" bash testbed/slurm_releases.sh $releases || rc=$?
        took "the Slurm releases ($releases)" $rc; [ $rc = 0 ] || status=1
        # Real cgroup v2 (this kernel has no cpu controller there): Slurm 24.11 with
        # cgroup/v2 and the agent in a qemu VM (70 s here; COSCHED_SLURM_VM=0 leaves it out)
        if [ "${COSCHED_SLURM_VM:-1}" = 0 ]; then
            echo "test.sh: the cgroup v2 VM run was left out (COSCHED_SLURM_VM=0)" >&2
        else
            rc=0; bash testbed/slurm_vm.sh || rc=$?
            took "the cgroup v2 VM run" $rc
            [ $rc = 0 ] || { echo "test.sh: the cgroup v2 VM run FAILED" >&2; status=1; }
        fi
    fi
fi
exit $status
