#!/bin/sh
# Start one role of the testbed (docs/testbed.md). Configuration comes read-only from
# /etc/cosched-testbed (written by `cosched testbed up` on the host): slurm.conf and its
# companions, the munge key, the agents' token.
set -eu
role="${1:-}"
conf=/etc/cosched-testbed

say() { echo "cosched-testbed[$role]: $*" >&2; }

# pip and other TLS clients trust the host's extra certificates (a TLS-intercepting proxy);
# read at start, not at build: the certificate can change.
if [ -d /usr/local/share/ca-certificates ] && ls /usr/local/share/ca-certificates/* >/dev/null 2>&1; then
    update-ca-certificates >/dev/null 2>&1 || say "update-ca-certificates failed (pip may not reach the registry)"
fi

start_munge() {
    install -d -o munge -g munge -m 700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 755 /run/munge
    install -o munge -g munge -m 400 "$conf/munge.key" /etc/munge/munge.key
    su -s /bin/sh munge -c "munged --force"
}

slurm_files() {
    install -d /etc/slurm /run/slurm /var/log/slurm
    for f in "$conf"/slurm/*; do install -m 644 "$f" /etc/slurm/; done
}

case "$role" in
slurmctld)
    start_munge; slurm_files
    install -d -o slurm -g slurm /var/spool/slurmctld /var/log/slurm
    exec slurmctld -D -i
    ;;
node)
    start_munge; slurm_files
    install -d "/var/spool/slurmd/${COSCHED_NODE:?}"
    # Docker mounts the container's own cgroups read-only; the node's agent (and slurmd's
    # cgroup plugins) write below the container's cgroup, as they would below a node's root.
    for c in cpu cpuacct cpuset memory freezer devices; do
        [ -d "/sys/fs/cgroup/$c" ] && mount -o remount,bind,rw "/sys/fs/cgroup/$c" 2>/dev/null \
            || say "cannot make /sys/fs/cgroup/$c writable"
    done
    node="${COSCHED_NODE:?COSCHED_NODE is not set}"
    # The agent runs in a cgroup of its own, as a systemd service would on a real node: the
    # jobs slurmd starts stay outside it (the agent refuses to move processes that share
    # its own cgroup and that it did not start: monitoring/README.md).
    mkdir -p /sys/fs/cgroup/cpu/cosched-agent
    sh -c 'echo $$ > /sys/fs/cgroup/cpu/cosched-agent/cgroup.procs && exec "$@"' agent \
        cosched agent --listen "0.0.0.0:${COSCHED_AGENT_PORT:-9137}" --token-file "$conf/agent.token" \
        --cgroup-root cosched --node-cpus "${COSCHED_NODE_CPUS:?}" \
        --cpu-per-core "${COSCHED_CPU_PER_CORE:?}" --state-dir /var/lib/cosched-agent \
        --guest-weight "${COSCHED_GUEST_WEIGHT:-idle}" \
        --discover-slurm >/var/log/cosched-agent.json 2>/var/log/cosched-agent.log &
    exec slurmd -D -N "$node"
    ;;
controller)
    start_munge; slurm_files
    # Idle: `cosched testbed run` executes the controller here with `docker exec`.
    exec sleep infinity
    ;;
mesos-master)
    # The emulated Mesos master (testbed/mesos: not Mesos, which cannot be installed here);
    # its agents run tasks as processes in cgroups below this container's own.
    for c in cpu cpuacct memory freezer; do
        [ -d "/sys/fs/cgroup/$c" ] && mount -o remount,bind,rw "/sys/fs/cgroup/$c" 2>/dev/null \
            || say "cannot make /sys/fs/cgroup/$c writable"
    done
    exec cosched mesos emulate --agents "${COSCHED_MESOS_AGENTS:?}" --cpus "${COSCHED_MESOS_CPUS:?}" \
        --cpu-scale "${COSCHED_MESOS_CPU_SCALE:?}" --listen "0.0.0.0:${COSCHED_MESOS_PORT:-5050}" \
        --workdir /var/lib/cosched-mesos
    ;;
*)
    say "unknown role '$role' (slurmctld, node, controller or mesos-master)"; exit 2
    ;;
esac
