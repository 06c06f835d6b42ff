"""What emulates a cluster: the local backend and ``cosched demo``'s live runs on it, the
emulated Mesos master (mesos/), the Docker testbed and its experiment runners. Its commands
(``cosched demo``, ``testbed``, ``mesos``) plug into the core through entry points
(pyproject.toml); the workload programs it runs are coscheduler/workloads."""
