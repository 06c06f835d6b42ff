#!/usr/bin/env bash
# What a site gets from `pip install` of a built wheel: build the sdist and, from it, the
# wheel (python -m build), install the wheel into a fresh virtual environment in a temporary
# folder OUTSIDE the checkout, and run from there (nothing of the checkout on sys.path):
#   cosched models list          every model file of the package listed and loadable
#   a learned policy             rl:lublin256 on a window of the bundled lublin_256.swf
#   cosched simulate paper --cores 64
#   cosched slurm up --nodes 1 / down   (as root: a real Slurm from the wheel's job_submit.lua)
# Exits non-zero on the first failure. About 1-3 min (most of it pip installing dependencies).
# Usage: bash .ci/wheel_smoke.sh   (COSCHED_PYTHON picks the python; default python3)
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
py="${COSCHED_PYTHON:-python3}"
work="$(mktemp -d /tmp/cosched-wheel-smoke.XXXXXX)"
chmod 755 "$work"              # munged and Slurm's job users must reach the cluster's folder
slurm_dir=""
cleanup() {
    if [ -n "$slurm_dir" ]; then
        "$work/venv/bin/cosched" slurm down --dir "$slurm_dir" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
step() { echo "wheel smoke: $*" >&2; }
t0=$SECONDS

# A copy of the checkout (building in place would leave build/ and *.egg-info behind).
mkdir -p "$work/src"
tar -C "$src" --exclude=./.venv --exclude=./.git --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=./build --exclude=./dist -cf - . | tar -C "$work/src" -xf -

step "building the sdist and the wheel (python -m build)"
"$py" -m venv "$work/buildenv"
pipq() { "$@" >"$work/pip.log" 2>&1 || { grep -v "^WARNING: Location" "$work/pip.log" | tail -20 >&2; exit 1; }; }
pipq "$work/buildenv/bin/pip" install -q --disable-pip-version-check build
"$work/buildenv/bin/python" -m build -q --outdir "$work/dist" "$work/src" >"$work/build.log" 2>&1 \
    || { tail -20 "$work/build.log" >&2; exit 1; }
sdist=$(ls "$work"/dist/coscheduler-*.tar.gz)
wheel=$(ls "$work"/dist/coscheduler-*.whl)
step "built $(basename "$sdist") and $(basename "$wheel") (the wheel from the sdist)"

# The wheel carries every file of the packages that is not Python (models, templates, data).
"$py" - "$wheel" "$src" <<'PY'
import subprocess, sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
files = subprocess.run(["git", "-C", sys.argv[2], "ls-files", "coscheduler", "slurm_plugin",
                        "mesos_framework", "monitoring", "testbed"],
                       capture_output=True, text=True).stdout.split()
missing = [f for f in files if not f.endswith(".py") and f not in names]
if not files:
    sys.exit("wheel smoke: git ls-files listed nothing (not a git checkout?)")
if missing:
    sys.exit(f"wheel smoke: {len(missing)} files missing from the wheel, e.g. {missing[:8]}")
print(f"wheel smoke: the wheel carries all {len(files)} files of the packages", file=sys.stderr)
PY

step "installing the wheel into a fresh venv in $work"
"$py" -m venv "$work/venv"
pipq "$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
cd "$work"                     # outside the checkout
unset PYTHONPATH
export COSCHED_DATA_DIR="$work/cache"
cosched="$work/venv/bin/cosched"
"$work/venv/bin/python" - "$src" <<'PY'
import sys, coscheduler, slurm_plugin
for m in (coscheduler, slurm_plugin):
    if m.__file__.startswith(sys.argv[1]):
        sys.exit(f"wheel smoke: {m.__name__} was imported from the checkout ({m.__file__})")
print(f"wheel smoke: coscheduler {coscheduler.__version__} from {coscheduler.__file__}",
      file=sys.stderr)
# Every body the wheel registers (entry points) loads from the wheel.
from coscheduler import plugins
for group in plugins.GROUPS:
    for name, target in plugins.targets(group).items():
        plugins.load(group, name)
        if sys.modules[target.split(":")[0]].__file__.startswith(sys.argv[1]):
            sys.exit(f"wheel smoke: entry point {group}:{name} loaded from the checkout")
print(f"wheel smoke: {sum(len(plugins.names(g)) for g in plugins.GROUPS)} entry points load",
      file=sys.stderr)
PY

step "cosched models list"
"$cosched" models list --all --json > models.json   # --all: failed/unevaluated gate too
"$work/venv/bin/python" - <<'PY'
import json, sys
rows = json.load(open("models.json"))
broken = [r["name"] for r in rows if not r["kind"]]
kinds = sorted({r["kind"] for r in rows if r["kind"]})
if broken or len(rows) != 34:
    sys.exit(f"wheel smoke: {len(rows)} models listed (34 shipped), broken: {broken}")
print(f"wheel smoke: {len(rows)} of 34 models listed and loaded ({', '.join(kinds)})",
      file=sys.stderr)
PY
"$cosched" models list --json > offered.json   # the release gate's reports are in the wheel
"$work/venv/bin/python" - <<'PY'
import json, sys
rows = json.load(open("offered.json"))
if not rows or any(r["gate"] != "pass" for r in rows):
    sys.exit(f"wheel smoke: models list offers {[(r['name'], r['gate']) for r in rows]}")
print(f"wheel smoke: {len(rows)} models pass the release gate", file=sys.stderr)
PY

step "a learned policy on a bundled trace"
trace=$("$work/venv/bin/python" -c "from coscheduler.data import swf_trace; print(swf_trace('lublin_256.swf'))")
case "$trace" in "$work"/venv/*) ;; *) echo "wheel smoke: bundled trace not in the venv: $trace" >&2; exit 1;; esac
"$cosched" simulate swf "$trace" --jobs 256 --policy FCFS,rl:lublin256 --inspector lublin256-sjf \
    --out "$work/batsim" --json > learned.json
"$work/venv/bin/python" - <<'PY'
import json, sys
out = json.load(open("learned.json"))
names = [o["policy"] for o in out]
if names != ["FCFS", "rl:lublin256", "SJF+inspector:lublin256-sjf"] or any(o["jobs"] != 256 for o in out):
    sys.exit(f"wheel smoke: unexpected learned run {names}")
print("wheel smoke: " + ", ".join(f"{o['policy']} bsld {o['avg_bsld']:.1f}" for o in out),
      file=sys.stderr)
PY
test -s "$work/batsim/rl-lublin256_jobs.csv"

step "cosched simulate paper --cores 64"
"$cosched" simulate paper --cores 64 --json > paper.json
"$work/venv/bin/python" -c "
import json, sys
d = json.load(open('paper.json'))
assert d['summary'], 'no summary'
print('wheel smoke: simulate paper: %d rows' % len(d['summary']), file=sys.stderr)"

if [ "$(id -u)" = 0 ]; then
    step "cosched slurm up --nodes 1 / down (real Slurm; job_submit.lua from the wheel)"
    slurm_dir="$work/slurm"
    "$cosched" slurm up --nodes 1 --dir "$slurm_dir" --json > slurm.json
    grep -q "COSCHED_PARTITION" "$slurm_dir/job_submit.lua" \
        || { echo "wheel smoke: no submit hook (job_submit.lua) in the cluster's folder" >&2; exit 1; }
    "$cosched" slurm status --dir "$slurm_dir" >/dev/null
    "$cosched" slurm down --dir "$slurm_dir" >/dev/null
    slurm_dir=""
else
    step "not root: cosched slurm up skipped"
fi
step "passed in $((SECONDS - t0)) s"
