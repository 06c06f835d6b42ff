#!/usr/bin/env bash
# Do the README's two commands work as written on a stock Debian 12 with Debian's own
# python3 (PEP 668: "externally managed", pip refuses to install outside a virtual
# environment)? Builds a minimal bookworm chroot with debootstrap, copies a clean export
# of this checkout (git archive HEAD) into it, and runs there, as root:
#
#   python3 -m venv .venv && . .venv/bin/activate && pip install -e . && cosched demo
#   bash testbed/test.sh
#
# Not part of the test suite: the chroot, Debian's python and the project's dependencies
# take several minutes to install (see the issue 8 report for measured times).
# Usage: [MIRROR=URL] bash testbed/stock_debian_check.sh [ROOTFS] [demo|tests|both]  (default: both)
# Needs root, debootstrap (installed here if missing) and access to Debian's and PyPI's
# package servers (a TLS-intercepting proxy's CA in /usr/local/share/ca-certificates is
# copied in). Mounts /proc, /sys and /dev into the chroot and unmounts them at the end.
set -euo pipefail
root="${1:-/tmp/cosched-stock-debian}"
what="${2:-both}"
src="$(cd "$(dirname "$0")/.." && pwd)"
[ "$(id -u)" = 0 ] || { echo "stock_debian_check: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap

# The Debian mirror this machine's apt uses (MIRROR=URL overrides): no host written here.
mirror="${MIRROR:-$(cd "$src" && python3 -m testbed.mirror)}" || exit 1
if [ ! -x "$root/usr/bin/python3" ]; then
    echo "== debootstrap bookworm into $root" >&2
    t0=$SECONDS
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        bookworm "$root" "$mirror" >/dev/null
    echo "== debootstrap took $((SECONDS - t0)) s" >&2
fi
# What a machine behind the same proxy needs: its CA, DNS, and pip's cert setting.
mkdir -p "$root/usr/local/share/ca-certificates"
cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/hosts "$root/etc/hosts"
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
chroot "$root" update-ca-certificates >/dev/null 2>&1 || true

rm -rf "$root/root/coscheduler"
mkdir -p "$root/root/coscheduler"
git -C "$src" archive HEAD | tar -x -C "$root/root/coscheduler"

mounted=()
cleanup() {
    for m in "${mounted[@]}"; do umount -R "$m" 2>/dev/null || umount -l "$m" || true; done
}
trap cleanup EXIT
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
for d in sys dev; do
    mount --rbind "/$d" "$root/$d" && mount --make-rslave "$root/$d" && mounted+=("$root/$d")
done

run() {  # a login-like clean environment: nothing of this host's python setup leaks in
    chroot "$root" env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -c "$1"
}
echo "== $(run 'python3 --version; grep PRETTY /etc/os-release')" >&2
echo "== outside a venv, Debian's pip refuses (PEP 668):" >&2
run 'cd /root/coscheduler && python3 -m pip install -e . 2>&1 | grep -m1 -o "externally-managed-environment"' \
    || { echo "stock_debian_check: expected pip to refuse (externally managed)" >&2; exit 1; }
if [ "$what" = demo ] || [ "$what" = both ]; then
    echo "== README main command" >&2
    t0=$SECONDS
    run 'cd /root/coscheduler && python3 -m venv .venv && . .venv/bin/activate && pip install -q -e . && cosched demo'
    echo "== main command took $((SECONDS - t0)) s" >&2
fi
if [ "$what" = tests ] || [ "$what" = both ]; then
    echo "== README test command (python3-venv removed first: test.sh must install it)" >&2
    run 'apt-get remove -y -q python3-venv "python3.*-venv" >/dev/null 2>&1; python3 -m venv /tmp/v 2>&1 | grep -m1 -q ensurepip && echo "venv unavailable, as on a stock install"; rm -rf /tmp/v'
    t0=$SECONDS
    run 'cd /root/coscheduler && rm -rf .venv && bash testbed/test.sh -q -p no:cacheprovider'
    echo "== test command took $((SECONDS - t0)) s" >&2
fi
