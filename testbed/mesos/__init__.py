"""An EMULATED Mesos master for tests and users (no Mesos master can be installed here).

It speaks a documented subset of the Mesos v1 scheduler HTTP API (JSON only) over real
HTTP and runs tasks as real local processes in per-agent cgroups. It shares no code with
the framework's driver (``mesos_framework/``): both are written from the Mesos
documentation, so each checks the other. See README.md in this folder.
"""

from .master import AgentSpec, Master, MasterConfig, TERMINAL_STATES
from .emulator import EmulatorUnavailable, MesosEmulator

__all__ = ["AgentSpec", "EmulatorUnavailable", "Master", "MasterConfig", "MesosEmulator",
           "TERMINAL_STATES"]
