#!/usr/bin/env bash
# The live Slurm tests against the Slurm releases of other Debian suites, each in a
# container built offline by this script (no registry is reachable here):
#
#   bash testbed/slurm_releases.sh [SUITE...]      # default: trixie (Slurm 24.11) sid (26.05)
#
# For each suite: an image `cosched-slurm-release:SUITE-<hash>` is debootstrapped from the
# Debian mirror this machine's apt uses (read from apt's sources, never written here),
# with Debian's Slurm, munge and the Python packages Debian has; `docker import` makes it
# an image and a second layer holds a virtual environment with the project's remaining
# dependencies (`pip` inside the container trusts the host's CA certificates, mounted
# read-only). Both are cached: a second run starts the tests at once. Then the working
# tree is copied into a container, installed there, and `pytest -m slurm` runs the live
# Slurm tests against that release. Every suite runs even when one fails; the script
# prints a line per suite and exits non-zero when any failed (a suite that could not be
# built counts as failed: nothing is skipped silently). The suites run one after the other.
#
# COSCHED_SLURM_PYTEST_ARGS: extra pytest arguments (default: the three live Slurm files).
# COSCHED_SLURM_RECORD=DIR: slurmrestd's answers are written to DIR/SUITE/rest_*.json
# (tests/test_slurm_rest_live.py records them; copy them to tests/fixtures/slurm/<release>/).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SUITES=("$@")
[ ${#SUITES[@]} -eq 0 ] && SUITES=(trixie sid)
CACHE=${COSCHED_SLURM_CACHE:-/var/cache/cosched-slurm-releases}
REPO=cosched-slurm-release
PY=${COSCHED_PYTHON:-python3}
mkdir -p "$CACHE"

say() { echo "slurm_releases: $*" >&2; }

mirror() {
    # The mirror this machine's apt already uses: deb822 sources first, then sources.list.
    local m
    m=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null)
    [ -z "$m" ] && m=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' \
                        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)
    [ -n "$m" ] || { say "no Debian mirror in apt's configuration (/etc/apt/sources.list*)"; return 1; }
    echo "$m"
}

# Debian packages installed in the image: Slurm and munge, the tools the tests call, and
# the project's heavier dependencies where Debian has them (fewer wheels to fetch).
PKGS="python3-venv python3-pip python3-setuptools procps slurm-wlm slurmctld slurmd slurm-client munge \
slurmrestd slurm-wlm-jwt-plugin \
python3-numpy python3-sklearn python3-psutil python3-click python3-yaml python3-urllib3 \
python3-prometheus-client python3-pytest python3-hypothesis python3-matplotlib"

remove_tree() {   # unmount what an interrupted debootstrap left mounted inside, then remove
    local t; t=$(realpath "$1")
    awk -v p="$t/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l
    rm -rf --one-file-system "$t"
}

base_image() {   # SUITE -> prints the debootstrapped base image, building it when missing
    local suite=$1 ref tree m log
    ref="$REPO:$suite-base"
    if docker image inspect "$ref" >/dev/null 2>&1; then echo "$ref"; return 0; fi
    m=$(mirror) || return 1
    command -v debootstrap >/dev/null || { say "debootstrap is missing (apt-get install debootstrap)"; return 1; }
    tree=$(mktemp -d "$CACHE/$suite-XXXX"); log="$CACHE/debootstrap-$suite.log"
    say "$suite: debootstrap from $m (log $log)"
    if ! debootstrap --variant=minbase --include=python3,ca-certificates "$suite" "$tree" "$m" >"$log" 2>&1; then
        say "$suite: debootstrap failed:"; tail -5 "$log" >&2
        cp "$tree/debootstrap/debootstrap.log" "$CACHE/debootstrap-$suite-inner.log" 2>/dev/null
        remove_tree "$tree"; return 1
    fi
    # sid's Release file on a dated mirror snapshot is past its Valid-Until.
    echo 'Acquire::Check-Valid-Until "false";' > "$tree/etc/apt/apt.conf.d/99cosched-valid-until"
    tar -C "$tree" -c . | docker import --change "LABEL cosched.slurm-release=$suite" - "$ref" >/dev/null \
        || { say "$suite: docker import failed"; remove_tree "$tree"; return 1; }
    remove_tree "$tree"
    echo "$ref"
}

test_image() {   # SUITE BASE -> the image with Slurm (apt) and /opt/venv (pip), cached by content
    local suite=$1 base=$2 tag ref name
    # the tag follows what goes in: the dependency lists (not the rest of pyproject.toml),
    # the Debian packages and the base image
    tag=$({ "$PY" -c 'import sys, tomllib; d = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(d["dependencies"] + d["optional-dependencies"]["test"]))' "$ROOT/pyproject.toml"
            echo "$PKGS"; docker image inspect --format '{{.Id}}' "$base"; } | sha256sum | cut -c1-12)
    ref="$REPO:$suite-$tag"
    if docker image inspect "$ref" >/dev/null 2>&1; then echo "$ref"; return 0; fi
    name="cosched-slurm-build-$suite-$$"
    say "$suite: installing Slurm (apt) and the project's dependencies (pip, host CA certificates)"
    docker rm -f "$name" >/dev/null 2>&1
    if ! docker run --name "$name" -v "$ROOT/pyproject.toml:/tmp/pyproject.toml:ro" \
            -v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro \
            -e PKGS="$PKGS" "$base" sh -ec '
        update-ca-certificates >/dev/null 2>&1
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends $PKGS >/dev/null
        apt-get clean
        python3 -m venv --system-site-packages /opt/venv
        python3 -c "import tomllib; d=tomllib.load(open(\"/tmp/pyproject.toml\",\"rb\"))[\"project\"]; print(\"\\n\".join(d[\"dependencies\"]+d[\"optional-dependencies\"][\"test\"]))" > /tmp/req.txt
        PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/venv/bin/pip install -q --disable-pip-version-check -r /tmp/req.txt
        rm -rf /root/.cache/pip' >&2; then
        say "$suite: installing into the image failed"; docker rm -f "$name" >/dev/null 2>&1; return 1
    fi
    docker commit "$name" "$ref" >/dev/null || { docker rm -f "$name" >/dev/null; return 1; }
    docker rm -f "$name" >/dev/null
    echo "$ref"
}

run_suite() {   # SUITE -> runs the live Slurm tests inside; returns pytest's status
    local suite=$1 base deps name args
    base=$(base_image "$suite") || return 10
    deps=$(test_image "$suite" "$base") || return 11
    name="cosched-slurm-test-$suite-$$"
    args=${COSCHED_SLURM_PYTEST_ARGS:-"-m slurm tests/test_slurm_live.py tests/test_slurm_paper_small.py tests/test_slurm_rest_live.py"}
    local record=()
    if [ -n "${COSCHED_SLURM_RECORD:-}" ]; then
        mkdir -p "$COSCHED_SLURM_RECORD/$suite"
        record=(-v "$(realpath "$COSCHED_SLURM_RECORD/$suite"):/record:rw" -e COSCHED_RECORD_REST=/record)
    fi
    say "$suite: running the live Slurm tests in $deps"
    # The host's cgroup tree read-write (slurmd's proctrack/task cgroups and the agent's
    # quotas); all capabilities but CAP_SYS_RESOURCE, which this machine lacks.
    docker rm -f "$name" >/dev/null 2>&1
    docker run --rm --name "$name" --init --cgroupns=host \
        --cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined \
        --security-opt apparmor=unconfined \
        -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v "$ROOT:/src:ro" \
        -v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro \
        -e COSCHED_SLURM_RELEASE_SUITE="$suite" "${record[@]}" \
        "$deps" bash -ec '
        update-ca-certificates >/dev/null 2>&1 || true
        mkdir -p /work/src && cd /src
        tar --exclude=./.venv --exclude=./.git --exclude="*.pyc" -cf - . | tar -C /work/src -xf -
        cd /work/src
        /opt/venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . >/dev/null
        echo "slurm_releases: $(slurmctld -V) $(/opt/venv/bin/python --version)" >&2
        chmod 755 /work /work/src
        exec /opt/venv/bin/python -m pytest -p no:cacheprovider -q '"$args"
}

run_logged() {   # SUITE: run_suite with each output line prefixed by the suite
    local suite=$1 t0 rc
    t0=$(date +%s)
    # also kept whole in the cache: a CI log shows only its tail
    run_suite "$suite" 2>&1 | sed -u "s/^/[$suite] /" | tee "$CACHE/last-run-$suite.log"
    rc=${PIPESTATUS[0]}
    echo "$rc $(( $(date +%s) - t0 ))" > "$CACHE/result-$suite-$$"
}

# The suites run one after the other (COSCHED_SLURM_PARALLEL=1: side by side). Side by side
# on a 2-core machine, the two clusters' tests starved each other (squeue timing out after
# 15 s, a measurement window of 6 s taking 70 s): one test of each release failed in a CI run.
pids=()
for suite in "${SUITES[@]}"; do
    if [ -z "${COSCHED_SLURM_PARALLEL:-}" ]; then run_logged "$suite"; else run_logged "$suite" & pids+=($!); fi
done
for p in "${pids[@]}"; do wait "$p"; done
failed=0
for suite in "${SUITES[@]}"; do
    read -r rc t < "$CACHE/result-$suite-$$" 2>/dev/null || { rc=99; t=0; }
    rm -f "$CACHE/result-$suite-$$"
    case $rc in
        0) say "$suite: passed (${t} s)";;
        10) say "$suite: FAILED: could not build the base image (${t} s)"; failed=1;;
        11) say "$suite: FAILED: could not install Slurm or the project's dependencies (${t} s)"; failed=1;;
        *) say "$suite: FAILED: pytest exit $rc (${t} s)"; failed=1;;
    esac
done
exit $failed
