"""Calls to many peers at once (node agents over HTTP): each call waits on the network, so
a pass over a thousand nodes asked one after the other waits a thousand round trips."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_THREADS = 16


def at_once(fn: Callable[[T], R], items: Sequence[T], threads: int = DEFAULT_THREADS) -> list[R]:
    """``[fn(x) for x in items]``, in order, at most ``threads`` calls at a time (in this
    thread when one would do). ``fn`` should not raise: an exception ends the call
    and is raised here once every call has ended."""
    n = min(threads, len(items))
    if n <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(n, thread_name_prefix="fanout") as pool:
        return list(pool.map(fn, items))


__all__ = ["DEFAULT_THREADS", "at_once"]
