"""Workload programs emulating the paper's four workflows, and the jobs that run them.

- definitions: the workflows as data (stages, task groups, where the numbers come from)
- summary: the measured WfCommons instances they are sized from (embedded copy)
- profile: expected runtime, CPU use, memory and walltime of a stage (for jobs, simulators)
- jobs: workflow_jobs / paper_mix / small_mix -> coscheduler.model.Job lists
- stage (``python -m coscheduler.workloads.stage``): runs one stage for real, reporting progress
- burn, tasks, pool: the CPU, memory, file and message work, and the worker processes
"""

from .definitions import WORKFLOWS, StageSpec, TaskGroup, WorkflowSpec, get_workflow
from .jobs import (DEMO_CORES, DEMO_NODE_CORES, DEMO_NODES, DEMO_SCALE, PAPER_MIX,
                   demo_core_speed, paper_mix, small_mix, stage_command, workflow_jobs)
from .profile import StageProfile, stage_profile, workflow_profiles

__all__ = [
    "DEMO_CORES", "DEMO_NODE_CORES", "DEMO_NODES", "DEMO_SCALE", "PAPER_MIX", "StageProfile",
    "StageSpec", "demo_core_speed",
    "TaskGroup", "WORKFLOWS", "WorkflowSpec", "get_workflow", "paper_mix", "small_mix",
    "stage_command", "stage_profile", "workflow_jobs", "workflow_profiles",
]
