"""Intervals on the wall clock, which NTP or an operator may step back.

Where the batch system's times are wall times (Slurm's start times, the backend's clock),
"is it time again?" is asked of the wall clock. Asked as ``now - last < every``, a step back
of an hour answered "not yet" for an hour: the Slurm backend kept its snapshot of the queue
and sent no lease renewal, so the agents (whose leases run on their monotonic clocks) lifted
every quota. ``due`` also answers "yes" when ``last`` lies in the future. Pure."""

from __future__ import annotations


def due(now: float, last: float, every: float) -> bool:
    """Whether ``every`` seconds have passed since ``last``, or the clock went back past it."""
    elapsed = now - last
    return not 0.0 <= elapsed < every


__all__ = ["due"]
