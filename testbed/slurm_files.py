"""The Slurm configuration the testbed's containers read, from ``slurm_plugin.conf``'s
renderers (the same slurm.conf, cgroup.conf and job_submit.lua as ``cosched slurm up``).

Container specifics only: slurmctld runs on host ``slurmctld``, each node is its own
container (Slurm node name = host name, Slurm's default ports on every host: each
container has its own network address), munge uses its default socket inside each
container, and a node that stops answering is set down after ``SlurmdTimeout``.
"""

from __future__ import annotations

from slurm_plugin.conf import (ClusterConfig, NodeConfig, render_cgroup_conf, render_job_submit,
                               render_slurm_conf)

from .compose import TestbedSpec

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMD_TIMEOUT_S = 10
PARTITION = "cosched"
DEFAULT_PARTITION = "batch"
JOBCOMP = "/var/log/slurm/jobcomp.txt"


def cluster_config(spec: TestbedSpec) -> ClusterConfig:
    return ClusterConfig(
        cluster_name="cosched", controller_host="slurmctld", controller_port=SLURMCTLD_PORT,
        nodes=tuple(NodeConfig(n, spec.cpus, SLURMD_PORT, hostname=n, real_memory_mb=spec.mem_mb)
                    for n in spec.node_names()),
        state_dir="/var/spool/slurmctld", spool_dir="/var/spool/slurmd", log_dir="/var/log/slurm",
        run_dir="/run/slurm", jobcomp_file=JOBCOMP, partition=PARTITION,
        default_partition=DEFAULT_PARTITION, slurmd_timeout_s=SLURMD_TIMEOUT_S,
        cgroup_plugin="cgroup/v1",
        # No hard deadline at the time limit, as in the paper's runs and the simulator's
        # default: an overrun shows as a longer runtime (and ASA_X's loss), not a killed
        # workflow. `cosched testbed run --timeout` bounds a run instead.
        extra=("OverTimeLimit=UNLIMITED",))


def slurm_files(spec: TestbedSpec) -> dict[str, str]:
    """File name -> content for the containers' /etc/slurm."""
    c = cluster_config(spec)
    return {"slurm.conf": f"# cosched testbed {spec.instance}\n" + render_slurm_conf(c),
            "cgroup.conf": render_cgroup_conf(c),
            "job_submit.lua": render_job_submit(PARTITION, (0,))}


__all__ = ["DEFAULT_PARTITION", "JOBCOMP", "PARTITION", "SLURMD_TIMEOUT_S", "cluster_config",
           "slurm_files"]
