#!/bin/bash
# Container health checks, run by Docker every second (so: bash and scontrol only, no
# Python start-up): `cosched-testbed-health ROLE`. Exit 0 when healthy, else 1 with one
# line saying why.
#   node          the node agent answers /healthz and slurmctld lists this node as usable
#                 (idle, mixed, allocated or completing; not drained, down or not responding)
#   controller    slurmctld answers `scontrol ping` from here (munge and slurm.conf work)
#   slurmctld     the same, from slurmctld's own container
#   mesos-master  the emulated Mesos master answers /health
set -u

http_ok() {   # http_ok PORT PATH: a 200 from 127.0.0.1:PORT within 5 s
    local reply
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
    read -r -t 5 reply <&3 || { exec 3>&-; return 1; }
    exec 3>&-
    [[ "$reply" == HTTP/1.?" 200"* ]]
}

case "${1:-}" in
node)
    port="${COSCHED_AGENT_PORT:-9137}"
    http_ok "$port" /healthz 2>/dev/null || { echo "agent not answering on port $port"; exit 1; }
    line="$(scontrol show node -o "${COSCHED_NODE:-}" 2>&1)" || { echo "scontrol: $line"; exit 1; }
    if [[ "$line" =~ State=(IDLE|MIXED|ALLOCATED|COMPLETING)([[:space:]]|$) ]]; then
        exit 0
    fi
    state="$(grep -o 'State=[^ ]*' <<<"$line")"
    echo "slurm node ${COSCHED_NODE:-?} is not usable yet (${state:-no state})"
    exit 1
    ;;
controller|slurmctld)
    out="$(scontrol ping 2>&1)"
    [[ "$out" == *" is UP"* ]] && exit 0
    echo "slurmctld not reachable: $out"
    exit 1
    ;;
mesos-master)
    port="${COSCHED_MESOS_PORT:-5050}"
    http_ok "$port" /health 2>/dev/null && exit 0
    echo "emulated Mesos master not answering on port $port"
    exit 1
    ;;
*)
    echo "usage: cosched-testbed-health node|controller|slurmctld|mesos-master"
    exit 2
    ;;
esac
