"""``python -m coscheduler ...`` runs the ``cosched`` command line (daemons started by
``cosched slurm up`` use it, so they need no ``cosched`` on PATH)."""

from .cli import main

main(prog_name="cosched")
