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
    python3 -m venv "$venv" || {
        echo "test.sh: python3 -m venv failed; on Debian/Ubuntu install python3-venv first" >&2
        exit 1
    }
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
# The Slurm tests (marker slurm) run a real Slurm 22.05 from Debian: install it when missing
# (about 6 s; `cosched slurm up` would do the same on first use).
if [ "$(id -u)" = 0 ] && ! command -v slurmctld >/dev/null 2>&1 && command -v apt-get >/dev/null; then
    echo "test.sh: installing slurm-wlm slurmctld slurmd slurm-client munge" >&2
    slurm_pkgs="slurm-wlm slurmctld slurmd slurm-client munge"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
        --no-install-recommends $slurm_pkgs >/dev/null \
    || { apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null \
         && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
            --no-install-recommends $slurm_pkgs >/dev/null; }
fi
export PATH="$venv/bin:$PATH"
exec "$venv/bin/python" -m pytest "$@"
