"""The resource-burning primitives the workload tasks are made of: CPU, memory and file I/O.

CPU work is a fixed amount of arithmetic, never "spin until a deadline": a task asks for
``seconds`` of work, which becomes a fixed number of kernel iterations through the reference
rates below. When the process gets less CPU (a cgroup quota, a busy core) the same iterations
take longer, which is exactly what a co-scheduler must be able to observe.

The kernel multiplies and adds over 128 KiB blocks of a float64 buffer, walking the buffer
block by block (so a large buffer is streamed through memory, a small one stays in cache).
``x <- 0.9999999 x + 1e-7`` keeps values near 1 forever: no overflow, no denormals.

Waiting work (storage, network) is real I/O followed by a sleep up to a time floor: the floor
emulates the slow shared file system and interconnect of the paper's cluster, on machines
whose local SSD and loopback would otherwise make every task CPU-bound.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BLOCK = 16384  # float64 elements per kernel iteration (128 KiB)
_MUL = 0.9999999
_ADD = 1e-7

# Kernel iterations per second on the reference core (AMD EPYC, 2 cores, numpy 1.26/2.x,
# Python 3.11), best of several runs of measure_rates() on an idle machine. A buffer that
# fits in the last-level cache runs faster than one streamed from DRAM.
REF_RATE_CACHED = 170_000.0
REF_RATE_STREAMING = 105_000.0
CACHED_LIMIT_BYTES = 16 * 2**20
# A slow core's work is run in slices of this much reference CPU, each followed by its sleep.
SLOW_SLICE_S = 0.01


def rate_for(buf: np.ndarray) -> float:
    """Reference iterations per second for a buffer of this size."""
    return REF_RATE_CACHED if buf.nbytes <= CACHED_LIMIT_BYTES else REF_RATE_STREAMING


def new_buffer(nbytes: int, fill: float = 1.0) -> np.ndarray:
    """A float64 buffer of at least one kernel block, every page touched (really resident)."""
    n = max(BLOCK, (int(nbytes) // 8 // BLOCK) * BLOCK)
    return np.full(n, fill, dtype=np.float64)


class Burner:
    """Runs kernel iterations over one buffer, remembering where it stopped.

    Consecutive calls continue where the last one stopped, so repeated tasks on a large
    buffer sweep all of it (memory-heavy), not just its first blocks.

    ``speed`` < 1 emulates a core slower than a real one (emulated nodes that claim more
    cores than the machine has): after each slice of work the thread sleeps so that it
    uses at most ``speed`` of a real CPU. Without it one thread takes a whole real CPU, so
    a sequential stage in a many-core allocation of slow cores looked as busy as all of
    them, and no co-scheduler could see the idle cores it was there to lend.
    """

    def __init__(self, buf: np.ndarray, speed: float = 1.0) -> None:
        if buf.dtype != np.float64 or buf.ndim != 1 or buf.size < BLOCK:
            raise ValueError(f"burn buffer must be 1-D float64 with >= {BLOCK} elements")
        if not 0.0 < speed <= 1.0:
            raise ValueError(f"burn speed must lie in (0, 1], got {speed!r}")
        self.speed = float(speed)
        self.buf = buf
        self.blocks = buf.size // BLOCK
        self.pos = 0
        self.rate = rate_for(buf)

    def iterations(self, n: int) -> None:
        """Run exactly n kernel iterations."""
        buf, blocks, pos = self.buf, self.blocks, self.pos
        mul, add = np.multiply, np.add
        for _ in range(int(n)):
            blk = buf[pos * BLOCK:(pos + 1) * BLOCK]
            mul(blk, _MUL, out=blk)
            add(blk, _ADD, out=blk)
            pos += 1
            if pos == blocks:
                pos = 0
        self.pos = pos

    def seconds(self, seconds: float) -> int:
        """Run the iterations that take ``seconds`` on the reference core; returns the count."""
        n = max(0, round(seconds * self.rate))
        if self.speed >= 1.0:
            self.iterations(n)
            return n
        step, left = max(1, round(SLOW_SLICE_S * self.rate)), n
        while left > 0:
            k = min(step, left)
            t0, c0 = time.perf_counter(), time.thread_time()
            self.iterations(k)
            # A slice of CPU c takes c / speed on the slow core: sleep what is left of that.
            # A thread slowed anyway (a quota, a busy machine) sleeps less or not at all.
            pause = (time.thread_time() - c0) / self.speed - (time.perf_counter() - t0)
            if pause > 0:
                time.sleep(pause)
            left -= k
        return n


def measure_rates(duration_s: float = 0.5, repeats: int = 3) -> dict[str, float]:
    """Measure this machine's kernel rates (best of ``repeats``) for comparison with REF_*:
    iterations per CPU second of this thread, so that on a busy machine the time another
    process holds the core does not count as a slower core (per wall second, a test beside
    two busy processes measured 0.72x the reference on a core of 1.5x)."""
    out = {}
    for name, nbytes in (("cached", 2**20), ("streaming", 256 * 2**20)):
        burner = Burner(new_buffer(nbytes))
        best = 0.0
        for _ in range(repeats):
            n, t0, c0 = 0, time.perf_counter(), time.thread_time()
            while time.perf_counter() - t0 < duration_s:
                burner.iterations(500)
                n += 500
            best = max(best, n / max(time.thread_time() - c0, 1e-6))
        out[name] = best
        del burner
    return out


# ---------------------------------------------------------------------------------------
# Files


def write_file(path: Path, nbytes: int, seed: float = 1.0, fsync: bool = False) -> int:
    """Write nbytes of float data to path (optionally fsync'ed to the disk); returns bytes."""
    data = np.full(max(1, int(nbytes) // 8), seed, dtype=np.float64)
    data[::512] = np.arange(data[::512].size, dtype=np.float64)  # not all-equal pages
    with open(path, "wb") as f:
        f.write(memoryview(data).cast("B"))
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return data.nbytes


def read_file(path: Path) -> np.ndarray:
    """Read a file written by write_file back as float64 values."""
    with open(path, "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, dtype=np.float64)


@dataclass
class WaitFloor:
    """Stretches a span of real I/O to at least ``floor_s`` by sleeping the remainder.

    Use as a context manager around real I/O: if the disk (or loopback) was faster than the
    emulated storage (or network), the difference is spent sleeping, off the CPU.
    """

    floor_s: float
    real_s: float = 0.0

    def __enter__(self) -> "WaitFloor":
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.real_s = time.perf_counter() - self._t0
        if exc[0] is None and self.real_s < self.floor_s:
            time.sleep(self.floor_s - self.real_s)
