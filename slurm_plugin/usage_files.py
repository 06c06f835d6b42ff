"""The job wrapper's usage records (``slurm_plugin.jobwrap``): one small file per job in a
folder every user may write to. The backend reads a job's record when the job ends; the
operator's measurements (``cosched slurm run-paper-small``) read them minutes later. Left
alone, the folder grows by a file (a disk block) per job for as long as the cluster runs:
``prune_usage`` removes the records older than a retention time, from the backend, about
once an hour.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from coscheduler import boundedjson
from coscheduler.oldfiles import Retention, prune_old_files

log = logging.getLogger("slurm_plugin.backend")

USAGE_KEPT_S = 7 * 86400.0     # records younger than this stay
USAGE_SCAN_S = 3600.0          # the backend looks at the folder this often
USAGE_SCAN_MAX = 200_000       # entries looked at per scan (a flooded folder costs a bound)
_MAX_USAGE_BYTES = 64 << 10    # a record: five numbers

# "<job id>.json", or the wrapper's temporary "<job id>.json.tmp.<pid>" a killed job left
_RECORD = re.compile(r"[0-9]{1,20}\.json(\.tmp\.[0-9]{1,10})?")


def prune_usage(directory: str | os.PathLike, before: float,
                max_entries: int = USAGE_SCAN_MAX) -> int:
    """Remove the records (and leftover temporary files) in ``directory`` last modified
    before ``before`` (wall time); other names are not touched, a link is removed, never
    followed. Looks at ``max_entries`` entries at most. Returns how many it removed."""
    return prune_old_files(directory, before, _RECORD, max_entries=max_entries,
                           what="usage record")


class UsageRecords:
    """The backend's side (a mixin of ``SlurmBackend``): a job's record, and the pruning."""

    usage_dir: Path | None
    _usage_retention: Retention        # when the folder is pruned next (the backend's own)

    def usage(self, job_id: int | str, uid: int | None = None) -> dict | None:
        """The job wrapper's record (``slurm_plugin.jobwrap``): start, end, cpu_s, rc.

        Written by the wrapper as the job's user into a folder every user may write to
        (mode 1777), at a path made of a predictable job id: read only if it belongs to
        the job's user (``uid``, from Slurm) or to root, and is a regular file (no link, no
        FIFO). Else another user could put there what a job "used", which the controller
        learns its class's usual CPU use from (and the wrapper then could not replace it)."""
        if self.usage_dir is None:
            return None
        path = self.usage_dir / f"{int(job_id)}.json"
        try:
            data = boundedjson.load_file(path, max_bytes=_MAX_USAGE_BYTES, max_depth=8,
                                         follow=False, owners={0} if uid is None else {0, uid})
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("job %s: the job wrapper's record is not used: %s", job_id, exc)
            return None
        return data if isinstance(data, dict) else None

    def _prune_usage(self) -> None:
        """About once an hour: the usage records older than ``USAGE_KEPT_S`` go
        (``usage_files``), so that the folder does not grow by a file per job forever."""
        if self.usage_dir is None:
            return
        n = self._usage_retention.run(lambda before: prune_usage(self.usage_dir, before))
        if n:
            log.info("removed %d usage records older than %g days from %s", n,
                     USAGE_KEPT_S / 86400, self.usage_dir)

__all__ = ["UsageRecords", "USAGE_KEPT_S", "USAGE_SCAN_MAX", "USAGE_SCAN_S", "prune_usage"]
