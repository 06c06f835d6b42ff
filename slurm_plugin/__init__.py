"""Slurm side: the submit/priority hook and the Slurm backend (later issues)."""
