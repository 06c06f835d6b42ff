"""Map a picklable function over independent tasks: in this process, on a local process
pool, or on a Dask or Ray cluster given by address.

Long parameter sweeps (``cosched simulate paper --repeat``, ``simulate learned``,
``simulate multi``) are many independent runs. ``run_tasks`` runs them and hands the
results back in task order, whatever order the workers finish in, so that a parallel
sweep prints exactly what a serial one prints. A task that raises comes back as a
``TaskFailed`` naming the task (and carrying the worker's traceback text).

What is independent is the caller's business: a task here is a whole chain of runs that
must stay in one process (ASA_X's learning carried over between repetitions).

The cluster libraries are optional (the ``cluster`` extra, ``dask[distributed]``; the
``ray`` extra, ``ray``) and are imported only when a cluster address is given: a Dask
scheduler's (``tcp://HOST:8786``), or a Ray cluster's (``ray://HOST:PORT``: Ray Client,
which needs ``ray[client]``; ``ray:HOST:PORT``: the head's GCS address, as ``ray start``
prints it; ``ray:auto``: the cluster this machine has joined). The same function runs as a
Ray task per chain, results in task order, so the figures are the serial ones.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing
import os
import pickle
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .model import InvalidInput

# Libraries that start threads on import: a forked child of a process that loaded them
# can deadlock, so the pool spawns fresh interpreters instead.
_THREADED = ("jax", "jaxlib", "torch", "tensorflow")

CLUSTER_EXTRA = "pip install 'coscheduler[cluster]'  (or: pip install 'dask[distributed]')"
RAY_EXTRA = "pip install 'coscheduler[ray]'  (or: pip install ray)"


class SweepError(Exception):
    """A sweep could not run (bad worker count, cluster unreachable or not installed)."""


class TaskFailed(SweepError):
    """One task of a sweep raised; ``task`` names it, ``worker_traceback`` is the worker's."""

    def __init__(self, task: str, cause: BaseException, worker_traceback: str = ""):
        self.task = task
        self.cause = cause
        self.worker_traceback = worker_traceback
        super().__init__(f"task {task} failed: {type(cause).__name__}: {cause}")

    def __reduce__(self):
        return type(self), (self.task, self.cause, self.worker_traceback)


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
    (``tcp://host:8786``) or a Ray cluster's (``ray:...``, the module docstring); then
    ``workers`` is ignored. Raises ``TaskFailed`` naming the
    first failing task (in task order); the tasks not yet started are cancelled
    (on a Ray cluster they end with the job instead: ``_run_ray`` says why).
    ``preload``: modules the tasks may import late and slowly (sklearn: about 1 s here).
    A forking pool with more workers than cores imports them once before it forks; else
    each worker imports them when a task needs them, in parallel with the others' work
    (importing them before forking made ``simulate paper --repeat 3`` wait 0.9 s for
    sklearn when only one chain of twelve uses it)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise SweepError(f"workers must be an integer >= 1, got {workers!r}")
    tasks = list(tasks)
    if cluster is not None and cluster.startswith("ray:"):
        return _run_ray(fn, tasks, cluster, on_result)
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
    if method == "fork" and n > default_workers():
        # Workers share cores: one import before the fork costs less than one per worker.
        _import_all(preload)
    ctx = multiprocessing.get_context(method)
    pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx)
    try:
        futures = [pool.submit(_call, fn, *t.args) for t in tasks]
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
        futures = [client.submit(_call, fn, *t.args, pure=False) for t in tasks]
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


def ray_target(address: str) -> str:
    """What ``ray.init(address=...)`` takes for ``--cluster`` ``address`` (``ray://HOST:PORT``,
    ``ray:HOST:PORT`` or ``ray:auto``); SweepError naming the address otherwise."""
    if address.startswith("ray://"):
        rest = address[len("ray://"):]
        target = address
    else:
        rest = target = address[len("ray:"):]
        if rest == "auto":
            return "auto"
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SweepError(f"--cluster {address!r}: expected ray://HOST:PORT (Ray Client), "
                         "ray:HOST:PORT (the head's address) or ray:auto")
    return target


def _reachable(address: str, target: str) -> None:
    # ray.init retries an address that does not answer for minutes: ask the socket first
    host, _, port = target.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise SweepError(f"cannot reach the Ray cluster at {address}: "
                         f"{exc.strerror or type(exc).__name__}") from None


def _call(fn, *args):
    """``fn(*args)`` in a worker. An error whose class cannot be rebuilt from its pickle
    (an ``__init__`` whose arguments are not its ``args``) would break a process pool when
    it arrives ("a worker process died") and hide what went wrong: it comes back as an
    ``InvalidInput`` (if it was one) or a ``RuntimeError`` naming its class, with the same
    message and the worker's traceback as ``worker_traceback``."""
    try:
        return fn(*args)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:   # noqa: BLE001 - whatever pickling raises, the message must get back
            if isinstance(exc, InvalidInput):
                portable: Exception = InvalidInput(str(exc))
            else:
                portable = RuntimeError(f"{type(exc).__name__}: {exc}")
            portable.worker_traceback = traceback.format_exc()
            raise portable from None
        raise


def _run_ray(fn, tasks: list[Task], address: str, on_result) -> list[Any]:
    target = ray_target(address)
    try:
        import ray
    except ImportError:
        raise SweepError(f"--cluster {address} needs Ray, which is not installed: {RAY_EXTRA}") from None
    own = not ray.is_initialized()      # a caller's own connection is kept, and left open
    if own:
        if target != "auto":
            _reachable(address, target)
        try:
            ray.init(address=target, log_to_driver=False, logging_level="WARNING")
        except ImportError as exc:      # Ray Client without its gRPC part
            raise SweepError(f"--cluster {address}: Ray Client needs pip install 'ray[client]' "
                             f"({exc})") from None
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise SweepError(f"cannot join the Ray cluster at {address}: {first}") from None
    try:
        remote = ray.remote(_call)      # any picklable callable, builtins and partials too
        refs = [remote.remote(fn, *t.args) for t in tasks]
        results = []
        for t, ref in zip(tasks, refs):
            try:
                r = ray.get(ref)
            except Exception as exc:
                # The other tasks are not cancelled here: ray.cancel racing a task that is
                # just finishing aborts this (the driver's) process inside Ray ("Check
                # failed: it != submissible_tasks_.end()", ray-project/ray#54846; it killed a
                # CI run's pytest with Ray 2.60). On our own connection, ray.shutdown below
                # ends the job and Ray stops what is left of it.
                # RayTaskError carries the task's own exception as .cause, its traceback in str()
                raise TaskFailed(t.name, getattr(exc, "cause", None) or exc, str(exc)) from None
            if on_result is not None:
                on_result(t, r)
            results.append(r)
        return results
    finally:
        if own:
            ray.shutdown()


__all__ = ["CLUSTER_EXTRA", "RAY_EXTRA", "SweepError", "Task", "TaskFailed", "default_workers",
           "ray_target", "run_tasks", "start_method"]
