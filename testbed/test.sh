#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs and starts what the tests need on a
# fresh Debian machine, then runs the whole suite, root/live tests included when run as root.
# Extra arguments go to pytest, e.g. `bash testbed/test.sh -m "not live" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  # Install Debian packages that are missing; needs root and apt-get.
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "test.sh: cannot install ${missing[*]} (need root and apt-get); tests that need them will skip" >&2
    return 0
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

apt_install stress-ng

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
exec python3 -m pytest "$@"
