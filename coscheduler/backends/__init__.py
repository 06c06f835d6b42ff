"""Bodies that run jobs behind ``coscheduler.backend.Backend``.

``virtual``: an in-memory backend in virtual time (unit tests, small end-to-end runs).
The simulator, the local host, Slurm and Mesos each add one module here or in their own
top-level folder; none holds a copy of any policy.
"""

from .virtual import Profile, VirtualBackend

__all__ = ["Profile", "VirtualBackend"]
