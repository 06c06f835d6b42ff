"""Slurm side: the submit hook (job_submit.lua), the priority hook, the Backend over Slurm's
command line, workflow submission, and a real Slurm cluster on one machine (docs/slurm.md).
It plugs into the core through entry points (pyproject.toml): the ``slurm`` backend
(connect.py), ``cosched slurm`` and ``cosched workload submit`` (cli.py)."""
