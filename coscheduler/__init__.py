"""coscheduler: an HPC co-scheduler after ASA_X (Souza, Pelckmans, Tordsson, 2021).

The package is the brain: pure logic over plain data. Backends (simulator, local host,
Slurm, Mesos) and the per-node monitoring agent sit at the edges.
"""

__version__ = "0.1.0"
