"""Which jobs the learned schedulers train and are evaluated on.

- Training sequences: ``SEQUENCE_JOBS`` (256) consecutive jobs starting in the first
  ``TRAIN_SHARE`` (20 %) of the trace, each replayed on an empty machine.
- Evaluation, RLScheduler-style: ten 1,024-job windows drawn as the reference's
  ``compare-pick-jobs.py`` draws them: ``start = rng.randint(1024, jobs - 1024 - 1)`` ten
  times from the legacy gym seeding of seed 1 (``legacy_rng``), whatever part of the
  trace they fall in.
- Evaluation on the held-out part (the *later* windows): ten 1,024-job windows drawn the
  same way from the jobs after the training part (``heldout_starts``). Training sequences,
  the teachers' scoring and the validation windows (which keep the best epoch and feed the
  release gate's first check) all lie inside ``[0, train_limit)``, so these windows hold
  only jobs no model saw while it was trained or its epoch chosen. (The gate's second
  check, ``gate.heldout_windows``, reads the whole held-out part to decide whether a
  model is offered; it trains nothing.) Job indices count the trace's jobs as read
  (``read_swf`` drops jobs with run time <= 0 or wider than the machine).
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from ..model import InvalidInput

SEQUENCE_JOBS = 256
EVAL_JOBS = 1024
EVAL_WINDOWS = 10
EVAL_SEED = 1
TRAIN_SHARE = 0.2


def legacy_rng(seed: int) -> np.random.RandomState:
    """numpy's RandomState seeded as gym's old ``seeding.np_random(seed)`` did (the
    reference environments use it): the first 8 bytes of SHA-512 of ``str(seed)`` as a
    little-endian integer, split into 32-bit words."""
    if not isinstance(seed, int) or seed < 0:
        raise InvalidInput(f"seed must be an integer >= 0, got {seed!r}")
    digest = hashlib.sha512(str(seed % 2 ** 64).encode("utf8")).digest()[:8]
    low, high = struct.unpack("<2I", digest)
    big = low + (high << 32)
    words = []
    while big > 0:
        big, word = divmod(big, 2 ** 32)
        words.append(word)
    rng = np.random.RandomState()
    rng.seed(words or [0])
    return rng


def eval_starts(total_jobs: int, jobs: int = EVAL_JOBS, count: int = EVAL_WINDOWS,
                seed: int = EVAL_SEED, first: int | None = None) -> list[int]:
    """Start indices of the evaluation windows (see the module docstring).

    ``first`` (the held-out part's first job) draws from ``[first, total - jobs)``
    instead of the reference's ``[jobs, total - jobs - 1)``.
    """
    rng = legacy_rng(seed)
    low, high = (jobs, total_jobs - jobs - 1) if first is None else (first, total_jobs - jobs)
    if high <= low:
        raise InvalidInput(f"a trace of {total_jobs} jobs is too short for {jobs}-job "
                           f"evaluation windows (from job {low})")
    return [int(rng.randint(low, high)) for _ in range(count)]


def train_limit(total_jobs: int, share: float = TRAIN_SHARE,
                sequence: int = SEQUENCE_JOBS) -> int:
    """First job index after the training part; at least one whole sequence."""
    limit = int(total_jobs * share)
    if limit < sequence + 1:
        if total_jobs < sequence + 1:
            raise InvalidInput(f"a trace of {total_jobs} jobs is too short for "
                               f"{sequence}-job training sequences")
        limit = sequence + 1
    return limit


def heldout_first(total_jobs: int, sequences=(SEQUENCE_JOBS,)) -> int:
    """The first held-out job: after the training part of every run whose sequence
    length is in ``sequences`` (on a short trace the training part grows with it)."""
    return max(train_limit(total_jobs, sequence=s) for s in {SEQUENCE_JOBS, *sequences})


def heldout_all_starts(total_jobs: int, jobs: int = EVAL_JOBS,
                       sequences=(SEQUENCE_JOBS,)) -> list[int]:
    """Every whole window of ``jobs`` jobs in the held-out part, back to back from
    ``heldout_first`` (a remainder shorter than a window is left out; none on a trace too
    short). The release gate's held-out check, and ``simulate learned --windows heldout``."""
    first = heldout_first(total_jobs, sequences)
    return list(range(first, total_jobs - jobs + 1, jobs))


def heldout_starts(total_jobs: int, jobs: int = EVAL_JOBS, count: int = EVAL_WINDOWS,
                   seed: int = EVAL_SEED, sequences=(SEQUENCE_JOBS,)) -> list[int]:
    """Evaluation windows inside the held-out part (from ``heldout_first``)."""
    return eval_starts(total_jobs, jobs, count, seed,
                       first=heldout_first(total_jobs, sequences))
