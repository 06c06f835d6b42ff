"""Mesos side: a v1 scheduler HTTP API framework with first-fit gang allocation over offers,
node-agent quotas, a queue folder and a Slurm feed (docs/mesos.md)."""
