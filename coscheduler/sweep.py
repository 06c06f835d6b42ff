"""Map a picklable function over independent tasks: in this process, on a local process
pool, or on a Dask cluster given by address.

Long parameter sweeps (``cosched simulate paper --repeat``, ``simulate learned``,
``simulate multi``) are many independent runs. ``run_tasks`` runs them and hands the
results back in task order, whatever order the workers finish in, so that a parallel
sweep prints exactly what a serial one prints. A task that raises comes back as a
``TaskFailed`` naming the task (and carrying the worker's traceback text).

What is independent is the caller's business: a task here is a whole chain of runs that
must stay in one process (ASA_X's learning carried over between repetitions).

The cluster library is optional (the ``cluster`` extra, ``dask[distributed]``) and is
imported only when a cluster address is given.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing
import os
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

# Libraries that start threads on import: a forked child of a process that loaded them
# can deadlock, so the pool spawns fresh interpreters instead.
_THREADED = ("jax", "jaxlib", "torch", "tensorflow")

CLUSTER_EXTRA = "pip install 'coscheduler[cluster]'  (or: pip install 'dask[distributed]')"


class SweepError(Exception):
    """A sweep could not run (bad worker count, cluster unreachable or not installed)."""


class TaskFailed(SweepError):
    """One task of a sweep raised; ``task`` names it, ``worker_traceback`` is the worker's."""

    def __init__(self, task: str, cause: BaseException, worker_traceback: str = ""):
        self.task = task
        self.cause = cause
        self.worker_traceback = worker_traceback
        super().__init__(f"task {task} failed: {type(cause).__name__}: {cause}")


@dataclass(frozen=True)
class Task:
    """One independent unit of a sweep: ``fn(*args)``, named for errors and progress."""

    name: str
    args: tuple = ()


def default_workers() -> int:
    """The cores this process may run on (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def start_method() -> str:
    """``fork`` when it is safe (Linux, no threads, no threaded library loaded), else ``spawn``."""
    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    if threading.active_count() > 1 or any(m in sys.modules for m in _THREADED):
        return "spawn"
    return "fork"


def run_tasks(fn: Callable[..., Any], tasks: Sequence[Task], workers: int | None = None,
              cluster: str | None = None,
              on_result: Callable[[Task, Any], None] | None = None,
              preload: Sequence[str] = ()) -> list[Any]:
    """``[fn(*t.args) for t in tasks]``, in task order; ``on_result(task, result)`` is called
    in task order as results arrive. ``workers``: processes on this machine (None: its
    cores; 1: in this process, exceptions unchanged). ``cluster``: a Dask scheduler address
    (``tcp://host:8786``); then ``workers`` is ignored. Raises ``TaskFailed`` naming the
    first failing task (in task order); the tasks not yet started are cancelled.
    ``preload``: modules the tasks will import late and slowly (sklearn: about 1 s here);
    a local pool imports them once before it forks, or once per worker when it spawns,
    rather than in the middle of a task (only when more than one process runs)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise SweepError(f"workers must be an integer >= 1, got {workers!r}")
    tasks = list(tasks)
    if cluster is not None:
        return _run_dask(fn, tasks, cluster, on_result)
    n = min(default_workers() if workers is None else workers, len(tasks))
    if n <= 1:
        results = []
        for t in tasks:
            r = fn(*t.args)
            if on_result is not None:
                on_result(t, r)
            results.append(r)
        return results
    return _run_pool(fn, tasks, n, on_result, tuple(preload))


def _remote_traceback(exc: BaseException) -> str:
    # concurrent.futures chains the worker's formatted traceback as the cause
    cause = exc.__cause__
    if cause is not None and type(cause).__name__ == "_RemoteTraceback":
        return str(cause)
    return "".join(traceback.format_exception(exc))


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


def _run_pool(fn, tasks: list[Task], n: int, on_result, preload: tuple[str, ...]) -> list[Any]:
    method = start_method()
    if method == "fork":
        _import_all(preload)   # the children inherit the loaded modules
    ctx = multiprocessing.get_context(method)
    pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx,
                                  initializer=_import_all if method != "fork" else None,
                                  initargs=(preload,) if method != "fork" else ())
    try:
        futures = [pool.submit(fn, *t.args) for t in tasks]
        results = []
        for t, fut in zip(tasks, futures):
            try:
                r = fut.result()
            except cf.process.BrokenProcessPool as exc:
                raise TaskFailed(t.name, RuntimeError(f"a worker process died ({exc})")) from None
            except Exception as exc:   # the task's own error, or its arguments did not pickle
                raise TaskFailed(t.name, exc, _remote_traceback(exc)) from None
            if on_result is not None:
                on_result(t, r)
            results.append(r)
        return results
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_dask(fn, tasks: list[Task], address: str, on_result) -> list[Any]:
    if address.startswith("ray:"):
        raise SweepError(f"--cluster {address}: Ray clusters are not supported yet; give a Dask "
                         "scheduler address (tcp://HOST:8786)")
    try:
        from distributed import Client
    except ImportError:
        raise SweepError(f"--cluster needs Dask's distributed, which is not installed: "
                         f"{CLUSTER_EXTRA}") from None
    try:
        client = Client(address, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise SweepError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    except ValueError as exc:
        raise SweepError(f"--cluster {address!r} is not a Dask scheduler address: {exc}") from None
    try:
        futures = [client.submit(fn, *t.args, pure=False) for t in tasks]
        results = []
        for t, fut in zip(tasks, futures):
            try:
                r = fut.result()
            except Exception as exc:
                for f in futures:
                    f.cancel()
                raise TaskFailed(t.name, exc, "".join(traceback.format_exception(exc))) from None
            if on_result is not None:
                on_result(t, r)
            results.append(r)
        return results
    finally:
        client.close()


__all__ = ["CLUSTER_EXTRA", "SweepError", "Task", "TaskFailed", "default_workers", "run_tasks",
           "start_method"]
