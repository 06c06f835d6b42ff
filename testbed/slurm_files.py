"""The Slurm configuration the testbed's containers read (slurm.conf, cgroup.conf).

Container specifics only: node names are the node containers' hostnames, each node claims
``spec.cpus`` CPUs (more than its container's CPU limit gives it, hence
``SlurmdParameters=config_overrides``), a node that stops answering is marked down after
``SlurmdTimeout`` and its batch jobs are requeued (``JobRequeue=1``), and job accounting
goes through cgroups inside each node container (the node agent finds jobs there).
"""

from __future__ import annotations

from .compose import TestbedSpec

SLURMD_TIMEOUT_S = 10


def slurm_conf(spec: TestbedSpec) -> str:
    last = spec.nodes
    names = "node1" if last == 1 else f"node[1-{last}]"
    lines = [
        "# Written by `cosched testbed up` for instance " + spec.instance,
        "ClusterName=cosched",
        "SlurmctldHost=slurmctld",
        "SlurmUser=root",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        "AuthType=auth/munge",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup",
        "JobAcctGatherType=jobacct_gather/cgroup",
        "ReturnToService=2",
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        "JobRequeue=1",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "JobCompType=jobcomp/filetxt",
        "JobCompLoc=/var/log/slurm/jobcomp.txt",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"NodeName={names} CPUs={spec.cpus} RealMemory={spec.mem_mb} State=UNKNOWN",
        f"PartitionName=batch Nodes={names} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=YES:4",
    ]
    return "\n".join(lines) + "\n"


def cgroup_conf() -> str:
    # No core or memory confinement: a node claims more CPUs than its container has, and
    # the node agent sets the CPU quotas itself.
    return "CgroupPlugin=cgroup/v1\nConstrainCores=no\nConstrainRAMSpace=no\n"


def slurm_files(spec: TestbedSpec) -> dict[str, str]:
    """File name -> content for the containers' /etc/slurm."""
    return {"slurm.conf": slurm_conf(spec), "cgroup.conf": cgroup_conf()}


__all__ = ["SLURMD_TIMEOUT_S", "cgroup_conf", "slurm_conf", "slurm_files"]
