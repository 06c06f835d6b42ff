#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests need on a fresh
# machine, then runs the whole suite; as root the tests that need real cgroups and the live
# demo run too (they skip with a reason otherwise). Extra arguments go to pytest, e.g.
# `bash testbed/test.sh -m "not live" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
exec python3 -m pytest "$@"
