"""Run a group's tasks over W worker processes, calling back after each finished task.

Our own small pool rather than multiprocessing.Pool: each worker keeps per-worker state
(buffers, a peer server) across tasks, and stays alive, serving its peers, until every task
of the group is done. Workers are forked (Linux), so they inherit the runner prepared in the
main process. One worker runs inline, in the main process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing as mp
import os
import queue
import signal
import traceback
from typing import Callable, Sequence

from .tasks import Runner


class TaskFailed(RuntimeError):
    """A task raised: the message carries the worker's traceback."""


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when the stage's main process dies (best effort)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the getppid() check below still stops an idle orphan


def _worker_main(runner: Runner, worker: int, parent: int, tasks: mp.Queue, results: mp.Queue) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    _die_with_parent()
    if os.getppid() != parent:  # died before prctl took effect
        return
    try:
        runner.setup(worker)
    except BaseException:
        results.put(("error", -1, traceback.format_exc()))
        return
    try:
        while True:
            try:
                task = tasks.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:  # main process gone: do not run on as an orphan
                    return
                continue
            if task is None:
                return
            try:
                runner.run(task)
            except BaseException:
                results.put(("error", task, traceback.format_exc()))
                return
            results.put(("done", task, ""))
    finally:
        runner.close()


def run_group(runner: Runner, tasks: int | Sequence[int], workers: int,
              on_done: Callable[[int], None]) -> None:
    """Run tasks 0..tasks-1 (or the given task indices: one part of a job of several
    parts) with ``workers`` processes; ``on_done(task)`` after each one."""
    tasks = list(range(tasks)) if isinstance(tasks, int) else list(tasks)
    runner.prepare()
    try:
        if workers <= 1:
            runner.setup(0)
            try:
                for t in tasks:
                    runner.run(t)
                    on_done(t)
            finally:
                runner.close()
            return
        _run_forked(runner, tasks, workers, on_done)
    finally:
        runner.finish()


def _run_forked(runner: Runner, tasks: list[int], workers: int, on_done: Callable[[int], None]) -> None:
    ctx = mp.get_context("fork")
    task_q: mp.Queue = ctx.Queue()
    result_q: mp.Queue = ctx.Queue()
    for t in tasks:
        task_q.put(t)
    procs = [ctx.Process(target=_worker_main, args=(runner, w, os.getpid(), task_q, result_q),
                         name=f"worker-{w}", daemon=True) for w in range(workers)]
    for p in procs:
        p.start()
    try:
        done = 0
        while done < len(tasks):
            try:
                kind, task, detail = result_q.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise TaskFailed(f"worker {dead[0].name} died with exit code {dead[0].exitcode}")
                continue
            if kind == "error":
                what = "a worker's setup" if task < 0 else f"task {task}"
                raise TaskFailed(f"{what} failed:\n{detail}")
            done += 1
            on_done(task)
        # Only now let the workers go: until every task is done they serve their peers.
        for _ in procs:
            task_q.put(None)
        for p in procs:
            p.join(timeout=10)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
        task_q.close()
        result_q.close()
