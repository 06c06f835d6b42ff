"""Submitting workflows to Slurm: one job per stage, chained with ``afterok``.

``sbatch_args`` (pure) turns one stage ``Job`` (from ``coscheduler.workloads.workflow_jobs``)
into sbatch options and a batch script; ``submit_jobs`` runs ``sbatch --parsable`` for
each stage in order, each depending on the previous stage's Slurm job. With ``cosched``
the jobs go to the co-scheduling partition with their metadata in ``--comment``;
without it they go to the default partition as plain Slurm jobs.
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from coscheduler.model import InvalidInput, Job

from .commands import SlurmCommands
from .metadata import JobMetadata, format_comment


@dataclass(frozen=True)
class SubmitOptions:
    partition: str = "cosched"           # used with cosched
    default_partition: str | None = None  # without cosched (None: Slurm's default)
    cosched: bool = True
    output_dir: str | None = None        # where %j.out goes (and the job's working folder)
    usage_dir: str | None = None         # jobwrap's records
    progress_dir: str | None = None      # the node agents' progress folder
    python: str = sys.executable
    memory: bool = False                 # pass --mem (clusters that schedule memory)
    # Slurm's --time = this x the walltime, in whole minutes. The walltime itself travels
    # in the metadata (what ASA_X measures a host against); a factor > 1 makes Slurm's
    # limit a safety net for scaled-down stages of seconds on a busy machine.
    time_limit_factor: float = 1.0


@dataclass(frozen=True)
class Submitted:
    stage: str
    name: str
    slurm_job_id: int


def time_limit_minutes(walltime_s: float) -> int:
    """Slurm time limits are whole minutes: round the walltime up (at least 1)."""
    return max(1, math.ceil(walltime_s / 60.0))


def job_script(job: Job, opts: SubmitOptions) -> str:
    """The batch script: the stage's command, under the job wrapper when a usage folder is set."""
    if not job.command:
        raise InvalidInput(f"job {job.job_id} has no command to run")
    cmd = list(job.command)
    if opts.usage_dir:
        wrap = [opts.python, "-m", "slurm_plugin.jobwrap", "--usage-dir", opts.usage_dir]
        if opts.progress_dir:
            wrap += ["--progress-dir", opts.progress_dir]
        cmd = wrap + ["--"] + cmd
    lines = ["#!/bin/sh", f"# coscheduler stage {job.job_id} ({job.job_class})"]
    if opts.progress_dir and not opts.usage_dir:
        lines.append("export COSCHED_PROGRESS_FILE="
                     f'"${{COSCHED_PROGRESS_FILE:-{opts.progress_dir}/$SLURM_JOB_ID.json}}"')
    lines.append("exec " + shlex.join(cmd))
    return "\n".join(lines) + "\n"


def sbatch_args(job: Job, opts: SubmitOptions, after: int | None = None) -> list[str]:
    """sbatch options for one stage job (the script comes on stdin)."""
    if not opts.time_limit_factor >= 1.0:
        raise InvalidInput(f"time_limit_factor must be >= 1, got {opts.time_limit_factor!r}")
    limit = time_limit_minutes(job.walltime_s * opts.time_limit_factor)
    args = ["--parsable", f"--job-name={job.job_id}", f"--time={limit}",
            f"--nodes={job.nodes}"]
    if job.nodes == 1:
        args += ["--ntasks=1", f"--cpus-per-task={job.cores}"]
    elif job.cores % job.nodes == 0:
        args += [f"--ntasks-per-node={job.cores // job.nodes}", "--cpus-per-task=1"]
    else:
        args += [f"--ntasks={job.cores}", "--cpus-per-task=1"]
    if opts.cosched:
        args.append(f"--partition={opts.partition}")
        comment = format_comment(JobMetadata(
            job_class=job.job_class, stage_type=job.stage_type, tasks=job.tasks,
            workflow=job.workflow, stage=job.job_id.rsplit(".", 1)[-1],
            walltime_s=math.ceil(job.walltime_s)))
        args.append(f"--comment={comment}")
    elif opts.default_partition:
        args.append(f"--partition={opts.default_partition}")
    if opts.memory and job.mem_mb:
        args.append(f"--mem={int(job.mem_mb)}M")
    if after is not None:
        args.append(f"--dependency=afterok:{int(after)}")
    if opts.output_dir:
        args += [f"--output={opts.output_dir}/%j.out", f"--chdir={opts.output_dir}"]
    return args


def submit_jobs(cmds: SlurmCommands, jobs: list[Job], opts: SubmitOptions) -> list[Submitted]:
    """Submit stage jobs in order; a job whose ``depends_on`` names an earlier job of the
    list waits for it with ``afterok``. Returns the Slurm ids."""
    if opts.output_dir:
        Path(opts.output_dir).mkdir(parents=True, exist_ok=True)
    ids: dict[str, int] = {}
    out = []
    for job in jobs:
        after = None
        for dep in job.depends_on:
            if dep not in ids:
                raise InvalidInput(f"job {job.job_id} depends on {dep}, which is not submitted before it")
            after = ids[dep]   # stages form a chain: the last parent is enough
        # No retry: a lost answer to a submission that worked would submit the stage twice.
        text = cmds.run("sbatch", *sbatch_args(job, opts, after), input_text=job_script(job, opts),
                        retry=False)
        first = text.strip().split(";")[0]
        if not (first.isascii() and first.isdigit()):
            raise InvalidInput(f"sbatch answered {text.strip()!r} for {job.job_id}, not a job id")
        ids[job.job_id] = int(first)
        out.append(Submitted(job.job_id.rsplit(".", 1)[-1], job.job_id, int(first)))
    return out


__all__ = ["SubmitOptions", "Submitted", "job_script", "sbatch_args", "submit_jobs",
           "time_limit_minutes"]
