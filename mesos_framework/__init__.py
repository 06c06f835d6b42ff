"""Mesos side: a v1 scheduler HTTP API framework with first-fit gang allocation over offers,
node-agent quotas, a queue folder and a Slurm feed (docs/mesos.md). It plugs into the core
through entry points (pyproject.toml): the ``mesos`` backend (connect.py), ``cosched bench
mesos`` (bench.py) and ``cosched workload submit --mesos`` (cli.py)."""
