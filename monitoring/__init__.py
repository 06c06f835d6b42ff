"""Per-node monitoring agent: samples jobs and applies cgroup CPU quotas."""
