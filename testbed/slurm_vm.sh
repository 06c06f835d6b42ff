#!/usr/bin/env bash
# Real cgroup v2 with the cpu controller, which this machine's kernel does not offer: a
# qemu VM (software emulation, tcg) boots Debian's kernel with a Debian trixie userland
# (Slurm 24.11, the project's source) as its initramfs, runs slurmctld + slurmd with
# CgroupPlugin=cgroup/v2 and the node agent with --discover-slurm, submits a real job, and
# checks that the agent found the job's cgroup from its processes, wrote the quota in
# place in the job's own cpu.max, moved no task, and that the job's CPU dropped to the
# quota; then a host and a guest job on one core: the guest's cpu.idle 1 and the host's
# cpu.weight leave the host >= 0.9 of the core, and clearing, or the agent killed -9 and
# restarted, gives the defaults back. Everything the VM prints comes back on the serial
# console (log below).
#
#   bash testbed/slurm_vm.sh            # needs root, Docker (testbed.engine ensure), qemu
#
# The rootfs is built once from the trixie base image of testbed/slurm_releases.sh and
# cached (/var/cache/cosched-slurm-vm); exit status 0 only when the VM printed VM-PASS.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${COSCHED_SLURM_VM_CACHE:-/var/cache/cosched-slurm-vm}
BASE=cosched-slurm-release:trixie-base
IMAGE=cosched-slurm-vm:trixie
mkdir -p "$CACHE"
say() { echo "slurm_vm: $*" >&2; }

command -v qemu-system-x86_64 >/dev/null || {
    say "installing qemu-system-x86 and cpio"
    pkgs="qemu-system-x86 cpio"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs >/dev/null \
    || { apt-get update -q >/dev/null \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs >/dev/null; } \
    || exit 1; }
docker image inspect "$BASE" >/dev/null 2>&1 || {
    say "no $BASE image: run testbed/slurm_releases.sh trixie first (it debootstraps it)"; exit 1; }
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "building the VM userland (Slurm, Python packages, Debian's kernel) from $BASE"
    docker rm -f cosched-slurm-vm-build >/dev/null 2>&1
    docker run --name cosched-slurm-vm-build \
        -v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro "$BASE" sh -ec '
        update-ca-certificates >/dev/null 2>&1; export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge procps \
            python3-psutil python3-numpy python3-click python3-yaml python3-urllib3 \
            python3-prometheus-client linux-image-amd64 iproute2 kmod >/dev/null
        apt-get clean; rm -rf /usr/share/doc /usr/share/man /usr/share/locale /var/lib/apt/lists/*' >&2 \
        || { say "building the VM userland failed"; exit 1; }
    docker commit cosched-slurm-vm-build "$IMAGE" >/dev/null && docker rm -f cosched-slurm-vm-build >/dev/null
fi

work=$(mktemp -d "$CACHE/run-XXXX")
trap 'rm -rf --one-file-system "$work"' EXIT
say "exporting the userland and packing the initramfs"
cid=$(docker create "$IMAGE" true)
mkdir -p "$work/root"
docker export "$cid" | tar -C "$work/root" -x --exclude=dev/* 2>/dev/null
docker rm "$cid" >/dev/null
cp "$work/root"/boot/vmlinuz-* "$work/vmlinuz"
# the kernel's modules are not needed (initramfs root, serial console) but for dummy: glibc's
# getaddrinfo (AI_ADDRCONFIG, which Slurm uses) answers nothing on a host whose only
# IPv4 address is loopback, so the VM gets a dummy interface with an address
find "$work/root/usr/lib/modules" -name 'dummy.ko*' -exec cp {} "$work/root/" \;
rm -rf "$work/root/boot" "$work/root/lib/modules" "$work/root/usr/lib/modules"
mkdir -p "$work/root/src"
tar --exclude=./.venv --exclude=./.git --exclude='*.pyc' -C "$ROOT" -cf - pyproject.toml coscheduler monitoring slurm_plugin \
    | tar -C "$work/root/src" -xf -
install -m 755 testbed/slurm_vm_init.sh "$work/root/init"
(cd "$work/root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd.gz"
say "initramfs $(du -h "$work/initrd.gz" | cut -f1); booting (tcg, 2 CPUs, 2 GiB)"
boot() {
    log="$CACHE/vm-$(date +%Y%m%d-%H%M%S).log"
    t0=$(date +%s)
    timeout "${COSCHED_SLURM_VM_TIMEOUT:-900}" qemu-system-x86_64 -accel tcg -smp 2 -m 2048 -nographic -no-reboot \
        -kernel "$work/vmlinuz" -initrd "$work/initrd.gz" \
        -append "console=ttyS0 panic=-1 rdinit=/init quiet" > "$log" 2>&1
    say "VM ran $(( $(date +%s) - t0 )) s; serial console log: $log"
    grep -E "^(VM-|RESULT)" "$log" >&2
}
boot
# The guest kernel itself can die under software emulation: one run in 27 here (2026-11-26)
# ended in "Oops: int3" in the scheduler, while the test was moving a task between cgroups,
# with no failed check before it; on 2026-11-29 two boots in a row died in pick_task_fair
# (the fair scheduler, with a guest's cpu.idle group), at different steps. That is the
# emulator's fault, not the code's: such a run is booted again, up to three boots in all,
# and said so. A run with a failed check (VM-FAIL) is never retried.
for again in 2 3; do
    if grep -q "^VM-PASS" "$log" || ! grep -q "Kernel panic" "$log" || grep -q "^VM-FAIL" "$log"; then
        break
    fi
    say "the VM's kernel panicked (log above: $log), not a failed check: boot $again of 3"
    boot
done
grep -q "^VM-PASS" "$log"
