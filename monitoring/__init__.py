"""Per-node monitoring agent: samples jobs and applies cgroup CPU quotas (agent.py, its HTTP
API in api.py). ``cosched agent`` (cli.py) and ``cosched bench agent`` (bench.py) plug into
the core through entry points (pyproject.toml)."""
