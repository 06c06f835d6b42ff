"""Opt-in metadata cases shared by the Python parser's tests and the real-sbatch tests of
job_submit.lua, so the two implementations of one grammar are checked against one table.

Each case: (comment, time limit in minutes, None if accepted else a piece of the message)."""

METADATA_CASES = [
    ("cosched:class=montage/mProject,type=parallel,tasks=198,workflow=m-1,stage=mProject", 5, None),
    ("cosched:type=sequential", 5, None),
    ("cosched:walltime=300", 5, None),
    ("no metadata here", 5, None),
    ("cosched:", 5, "metadata is empty"),
    ("cosched:type=serial", 5, "type must be sequential or parallel"),
    ("cosched:tasks=0", 5, "tasks must be an integer >= 1"),
    ("cosched:tasks=ten", 5, "tasks must be an integer >= 1"),
    ("cosched:walltime=301", 5, "longer than the job's time limit"),
    ("cosched:class=a/../b", 5, "class 'a/../b' is not valid"),
    ("cosched:class=-x", 5, "class '-x' is not valid"),
    ("cosched:priority=9", 5, "key 'priority' is unknown"),
    ("cosched:type=parallel,type=sequential", 5, "given twice"),
    ("cosched:tasks", 5, "is not key=value"),
    ("cosched:workflow=a/b", 5, "workflow 'a/b' is not valid"),
]
