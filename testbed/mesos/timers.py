"""One thread that runs callbacks at given times (offer timeouts, filter expiries, status
update retries, failover timeouts, kill grace periods, allocation passes).

A callback is cancelled by its owner checking a generation number; the heap never needs
searching. Exceptions in a callback are logged and never stop the thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable

log = logging.getLogger("testbed.mesos.timers")


class Timers:
    def __init__(self, name: str = "mesos-emu-timers"):
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` once at monotonic time ``when`` (at once if it has passed)."""
        with self._cv:
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            if self._heap[0][2] is fn:
                self._cv.notify()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.call_at(time.monotonic() + max(0.0, delay), fn)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else self._heap[0][0] - time.monotonic()
                    self._cv.wait(timeout)
                if self._stop:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                log.exception("timer callback %r failed", fn)

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._heap.clear()
            self._cv.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
