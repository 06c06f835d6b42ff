"""Slurm side: the submit hook (job_submit.lua), the priority hook, the Backend over Slurm's
command line, workflow submission, and a real Slurm cluster on one machine (docs/slurm.md)."""
