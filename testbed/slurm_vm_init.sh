#!/bin/sh
# /init of the VM that testbed/slurm_vm.sh boots: real cgroup v2 with the cpu controller,
# Slurm with CgroupPlugin=cgroup/v2 (no systemd: IgnoreSystemd=yes), the node agent, one
# real job under a quota, then a host and a guest job on one core with their roles (guest
# cpu.idle 1, host cpu.weight), cleared, held again and the agent killed -9 and restarted
# (the defaults come back). Prints RESULT lines and VM-PASS or VM-FAIL on the serial
# console, then powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONPATH=/src HOME=/root
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm /run /tmp; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
T0=$(cut -d. -f1 /proc/uptime 2>/dev/null || echo 0)
step() { echo "VM-STEP $(( $(cut -d. -f1 /proc/uptime) - T0 )) s: $*"; }
finish() { echo "$1"; sync; echo o > /proc/sysrq-trigger; sleep 10; }
fail() { echo "VM-FAIL: $*"; for f in /tmp/s/log/*.log /tmp/agent.log; do echo "== $f"; tail -n 15 "$f" 2>/dev/null; done; finish "VM-FAIL"; }
echo "RESULT kernel $(uname -r), cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
# the init process must leave the root cgroup before controllers are given to children
mkdir -p /sys/fs/cgroup/init && echo $$ > /sys/fs/cgroup/init/cgroup.procs
echo "+cpu +cpuset +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control || fail "cannot enable controllers"
step "cgroup v2 ready"
# a watchdog: whatever hangs, the logs come out and the VM stops
( sleep "${VM_WATCHDOG_S:-480}"; fail "watchdog: nothing finished within ${VM_WATCHDOG_S:-480} s" ) &
hostname vm; echo "127.0.0.1 vm localhost" > /etc/hosts
ip link set lo up
insmod /dummy.ko* && ip link add d0 type dummy && ip addr add 10.11.12.13/24 dev d0 && ip link set d0 up \
    || fail "no dummy network interface (Slurm's getaddrinfo needs a non-loopback address)"
D=/tmp/s; mkdir -p $D/munge $D/state $D/spool/vm $D/log; chmod 755 $D $D/munge
dd if=/dev/urandom of=$D/munge/key bs=128 count=1 2>/dev/null; chmod 600 $D/munge/key
munged -S $D/munge/sock --key-file=$D/munge/key --pid-file=$D/munge/pid --log-file=$D/log/munge.log \
    --seed-file=$D/munge/seed || fail "munged"
cat > $D/slurm.conf <<CONF
ClusterName=vm
SlurmctldHost=vm(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/ctld.pid
SlurmdPidFile=$D/d.pid
SlurmctldLogFile=$D/log/ctld.log
SlurmdLogFile=$D/log/d.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=bf_interval=1
ReturnToService=2
MpiDefault=none
NodeName=vm NodeAddr=127.0.0.1 CPUs=2 RealMemory=1500 State=UNKNOWN
PartitionName=cosched Nodes=vm Default=YES OverSubscribe=YES:4 MaxTime=INFINITE State=UP
CONF
cat > $D/cgroup.conf <<CONF
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
EnableControllers=yes
ConstrainCores=yes
CONF
step "munged started"
export SLURM_CONF=$D/slurm.conf
slurmctld -f $SLURM_CONF || fail "slurmctld"
slurmd -f $SLURM_CONF -N vm || fail "slurmd"
step "slurmctld and slurmd started"
i=0; until sinfo -h -o %T 2>/dev/null | grep -q idle; do i=$((i+1)); [ $i -gt 40 ] && fail "node not idle"; sleep 2; done
echo "RESULT $(sinfo -V) up, node idle after ${i} s"
step "starting the agent"
start_agent() {
    python3 -m coscheduler agent --listen 127.0.0.1:9137 --cgroup-root cosched --interval 0.5 \
        --state-dir /tmp/agent --discover-slurm --slurm-node vm --log-level WARNING > /tmp/agent.json 2>> /tmp/agent.log &
    AGENT=$!
    i=0; until grep -q url /tmp/agent.json 2>/dev/null; do i=$((i+1)); [ $i -gt 120 ] && fail "agent did not start"; sleep 1; done
}
start_agent
echo "RESULT agent up after ${i} s: $(head -c 200 /tmp/agent.json)"
# CPU a cgroup used, read from its cpu.stat: shared by the checks below.
cat > /tmp/cgcpu.py <<'PY'
import time
def usage(cg):
    """Seconds of CPU the cgroup ``cg`` (a directory) has used."""
    for line in open(cg + "/cpu.stat"):
        if line.startswith("usage_usec"):
            return int(line.split()[1]) / 1e6
def cpu_over(cgs, seconds):
    """CPUs each cgroup of ``cgs`` used over the next ``seconds``."""
    u0, t0 = {c: usage(c) for c in cgs}, time.time()
    time.sleep(seconds)
    return {c: (usage(c) - u0[c]) / (time.time() - t0) for c in cgs}
PY
JOB=$(sbatch --parsable -p cosched -c 1 -t 10 -o /tmp/job.out --wrap "exec python3 -c 'while True: pass'") || fail "sbatch"
echo "RESULT job $JOB submitted"
python3 - "$JOB" <<'PY' || fail "the checks (above)"
import json, os, sys, time
sys.path.insert(0, "/src")
from monitoring.client import AgentClient
from monitoring.cgroupfs import slurm_job_cgroup_v2, unified_path
jid = sys.argv[1]
info = json.loads(open("/tmp/agent.json").read().splitlines()[0])
c = AgentClient(info["url"], token_file=info["token_file"], timeout=30)
def wait(pred, what, t=120):
    end = time.time() + t
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")
view = wait(lambda: next((v for v in c.jobs() if v["job_id"] == jid and v.get("pids")), None), "the agent to find the job")
pid = max(view["pids"])
proc_cg = unified_path(open(f"/proc/{pid}/cgroup").read())
job_cg = "/sys/fs/cgroup" + slurm_job_cgroup_v2(proc_cg)
print(f"RESULT the job's task {pid} is in {proc_cg}; job cgroup {job_cg}; agent: batch cgroup {view.get('batch_cgroup')}, cores {view.get('cores')}")
sys.path.insert(0, "/tmp")
from cgcpu import cpu_over as cpus
def cpu_over(seconds):
    return cpus([job_cg], seconds)[job_cg]
time.sleep(2)
free = cpu_over(6)
print(f"RESULT unlimited: cpu.max {open(job_cg + '/cpu.max').read().strip()!r}, job CPU {free:.3f}")
c.set_quota(jid, 0.25, 120)
quota = open(job_cg + "/cpu.max").read().strip()
time.sleep(1)
limited = cpu_over(6)
print(f"RESULT quota 0.25: cpu.max {quota!r}, job CPU {limited:.3f}")
still = unified_path(open(f"/proc/{pid}/cgroup").read())
ours = [e.name for e in os.scandir("/sys/fs/cgroup/cosched") if e.is_dir()] if os.path.isdir("/sys/fs/cgroup/cosched") else []
print(f"RESULT the task is still in {still}; job cgroups in the agent's own tree: {ours}")
c.clear_quota(jid)
after = open(job_cg + "/cpu.max").read().strip()
print(f"RESULT quota cleared: cpu.max {after!r}")
ok = (quota == "25000 100000" and still == proc_cg and not ours and after.startswith("max")
      and free > 0.6 and limited <= 0.25 * 1.2 and limited < free * 0.5)
print(f"RESULT slowdown: {free / max(limited, 1e-9):.2f}x less CPU under the quota")
sys.exit(0 if ok else 1)
PY
scancel "$JOB"
step "roles: a host and its guest on one core"
# Both jobs hold the node's two CPUs (--oversubscribe: they share them) and pin their busy
# process to CPU 0, so they contend for one core, as a host and the guest it lends to do.
BUSY0="exec taskset -c 0 python3 -c 'while True: pass'"
HOST=$(sbatch --parsable -p cosched -c 2 --oversubscribe -t 10 -o /tmp/host.out --wrap "$BUSY0") || fail "sbatch host"
GUEST=$(sbatch --parsable -p cosched -c 2 --oversubscribe -t 10 -o /tmp/guest.out --wrap "$BUSY0") || fail "sbatch guest"
echo "RESULT host job $HOST and guest job $GUEST submitted"
python3 - "$HOST" "$GUEST" <<'PY' || fail "the role checks (above)"
import json, sys, time
sys.path.insert(0, "/src")
from monitoring.client import AgentClient
from monitoring.cgroupfs import slurm_job_cgroup_v2, unified_path
from monitoring.roles import HOST_WEIGHT
host, guest = sys.argv[1], sys.argv[2]
info = json.loads(open("/tmp/agent.json").read().splitlines()[0])
c = AgentClient(info["url"], token_file=info["token_file"], timeout=30)
end = time.time() + 120
while time.time() < end:
    views = {v["job_id"]: v for v in c.jobs() if v.get("pids") and v["status"] == "running"}
    if host in views and guest in views:
        break
    time.sleep(0.5)
else:
    raise SystemExit("timed out waiting for the agent to find both jobs")
cg = {j: "/sys/fs/cgroup" + slurm_job_cgroup_v2(unified_path(open(f"/proc/{max(views[j]['pids'])}/cgroup").read()))
      for j in (host, guest)}
def read(j, f):
    try:
        return open(f"{cg[j]}/{f}").read().strip()
    except OSError as e:
        return f"unreadable ({e.strerror})"
sys.path.insert(0, "/tmp")
from cgcpu import cpu_over as cpus
def cpu_over(seconds):
    used = cpus(list(cg.values()), seconds)
    return {j: used[cg[j]] for j in cg}
def files(j):
    return f"cpu.max {read(j, 'cpu.max')!r}, cpu.idle {read(j, 'cpu.idle')}, cpu.weight {read(j, 'cpu.weight')}"
time.sleep(0.5)
free = cpu_over(3)
print(f"RESULT no roles, both on CPU 0: host CPU {free[host]:.3f}, guest CPU {free[guest]:.3f}; "
      f"host {files(host)}; guest {files(guest)}")
# ASA_X lends a = 0.25 of the host's 2 cores: host 1 - a, guest a. The host's cap (1.5 CPUs)
# stays above the one core it uses: under a loaded machine the VM's clock counts stolen time
# as run time, and a cap of exactly one core then throttles the host and hands the guest
# the rest of each period (seen: share 0.916 with 0.5 / 0.5 at a load of 12).
c.set_quota(host, 0.75, 120, role="host")
c.set_quota(guest, 0.25, 120, role="guest")
h_files, g_files = files(host), files(guest)
h_weight, g_idle = read(host, "cpu.weight"), read(guest, "cpu.idle")
time.sleep(0.5)
shared = cpu_over(3)
share = shared[host] / max(shared[host] + shared[guest], 1e-9)
free_share = free[host] / max(free[host] + free[guest], 1e-9)
print(f"RESULT roles set: host {h_files}; guest {g_files}")
print(f"RESULT roles, both on CPU 0: host CPU {shared[host]:.3f}, guest CPU {shared[guest]:.3f}; "
      f"host's share of the core {share:.3f} (without roles {free_share:.3f})")
c.clear_quota(host)
c.clear_quota(guest)
after = {j: (read(j, "cpu.max"), read(j, "cpu.idle"), read(j, "cpu.weight")) for j in cg}
print(f"RESULT cleared: host {files(host)}; guest {files(guest)}")
ok = (h_weight == str(HOST_WEIGHT) and g_idle == "1" and share >= 0.9 and shared[host] >= 0.9 * (free[host] + free[guest])
      and free_share < 0.75 and all(v == ("max 100000", "0", "100") for v in after.values()))
c.set_quota(host, 0.75, 600, role="host")      # held again, for the crash below
c.set_quota(guest, 0.25, 600, role="guest")
print(f"RESULT roles held before kill -9: host {files(host)}; guest {files(guest)}")
sys.exit(0 if ok else 1)
PY
step "the agent killed (-9) with the roles held, and started again"
kill -9 "$AGENT"; wait "$AGENT" 2>/dev/null
start_agent
python3 - "$HOST" "$GUEST" <<'PY' || fail "the recovery checks (above)"
import json, os, sys
info = json.loads(open("/tmp/agent.json").read().splitlines()[0])
rec = info["recovery"]
dirs = {os.path.basename(d): d for d, _, _ in os.walk("/sys/fs/cgroup/system.slice")}
seen = {j: tuple(open(f"{dirs['job_' + j]}/{f}").read().strip() for f in ("cpu.max", "cpu.idle", "cpu.weight"))
        for j in sys.argv[1:]}
print(f"RESULT after the restart: recovery restored in place {rec.get('restored_in_place')}; "
      f"host cpu.max/idle/weight {seen[sys.argv[1]]}; guest {seen[sys.argv[2]]}")
ok = (sorted(rec.get("restored_in_place") or []) == sorted(sys.argv[1:])
      and all(v == ("max 100000", "0", "100") for v in seen.values()))
sys.exit(0 if ok else 1)
PY
step "recovery checked"
scancel "$HOST" "$GUEST"
step "a job in the agent's own cgroup tree (a Mesos task's way): quota, mean CPU at exit"
# Not a Slurm job: the agent makes its cgroup under its own root (cosched/), caps it there
# and, when its process ends, reads its mean CPU over its life from cpu.stat before the
# cgroup goes (life_cpu_percent: what a Mesos job's outcome carries).
python3 - <<'PY' || fail "the own-tree checks (above)"
import json, os, subprocess, sys, time
sys.path.insert(0, "/src")
from monitoring.client import AgentClient
busy = subprocess.Popen(["taskset", "-c", "1", "python3", "-c", "while True: pass"])
pid = busy.pid
# started in a cgroup of its own, as a Mesos agent starts a task (a process in the agent's
# own cgroup, /init here, is refused: the rule 'agent's cgroup')
os.makedirs("/sys/fs/cgroup/task1", exist_ok=True)
with open("/sys/fs/cgroup/task1/cgroup.procs", "w") as f:
    f.write(str(pid))
info = json.loads(open("/tmp/agent.json").read().splitlines()[0])
c = AgentClient(info["url"], token_file=info["token_file"], timeout=30)
view = c.register_job("own1", [pid], 1.0)
cg = view["cgroup"]
in_cg = pid in [int(x) for x in open(f"{cg}/cgroup.procs").read().split()]
sys.path.insert(0, "/tmp")
from cgcpu import cpu_over as cpus
def cpu_over(seconds):
    return cpus([cg], seconds)[cg]
time.sleep(1)
free = cpu_over(3)
c.set_quota("own1", 0.5, 120)
quota = open(f"{cg}/cpu.max").read().strip()
time.sleep(0.5)
limited = cpu_over(3)
print(f"RESULT own tree: cgroup {cg}, process in it {in_cg}; unlimited CPU {free:.3f}; "
      f"cpu.max {quota!r}, CPU {limited:.3f}")
busy.kill()
busy.wait()
end = time.time() + 60
while time.time() < end and c.job("own1")["status"] == "running":
    time.sleep(0.5)
done = c.job("own1")
life = done.get("life_cpu_percent")
while time.time() < end and os.path.isdir(cg):    # (removed at once when empty)
    time.sleep(0.5)
gone = not os.path.isdir(cg)
print(f"RESULT own tree, process killed: status {done['status']}, life_cpu_percent {life}, "
      f"cgroup removed {gone}")
ok = (cg.startswith("/sys/fs/cgroup/cosched/") and in_cg and quota == "50000 100000"
      and free > 0.6 and limited <= 0.5 * 1.2 and done["status"] == "finished"
      and life is not None and 40.0 <= life <= 100.0 and gone)
os.rmdir("/sys/fs/cgroup/task1")
sys.exit(0 if ok else 1)
PY
step "done"
finish "VM-PASS"
