"""Scheduling policies that do not depend on any backend.

``queue`` holds the queue-ordering policies (FCFS, SJF, WFP3, ...). They take plain
numbers, so the simulator, the live controller and the Slurm priority hook all use the
same objects.
"""

from .queue import POLICIES, QueuePolicy, get_policy, order_queue, policy_names

__all__ = ["POLICIES", "QueuePolicy", "get_policy", "order_queue", "policy_names"]
