"""Workload traces and workflow instances shipped with coscheduler (see README.md here).

Package data, so a wheel user has them too: ``swf/`` holds four Parallel Workloads Archive
traces under the archive's own file names, ``workflows/`` two WfCommons instances.
``cosched data fetch`` puts any other archive trace in a cache folder (``fetch.py``).
"""

from __future__ import annotations

from pathlib import Path

from ..model import InvalidInput, shown
from ..resources import resource_dir, resource_path

SWF_TRACES = ("lublin_256.swf", "lublin_256_new2.swf", "HPC2N-2002-2.2-cln.swf.gz",
              "CTC-SP2-1996-3.1-cln.swf.gz")
WORKFLOW_INSTANCES = ("montage-chameleon-2mass-01d-001.json", "blast-chameleon-small-001.json")


def swf_dir() -> Path:
    """The folder of the bundled SWF traces (the default ``--data-dir`` of the commands)."""
    return resource_dir(__name__, "swf")


def swf_trace(name: str) -> Path:
    """One bundled trace by its archive file name (one of ``SWF_TRACES``: never a path, so
    a name read from a file cannot lead out of the folder); InvalidInput otherwise."""
    if not isinstance(name, str) or name not in SWF_TRACES:
        raise InvalidInput(f"{shown(name)} is not a bundled trace; bundled: "
                           f"{', '.join(SWF_TRACES)}")
    return resource_path(__name__, "swf", name)


def workflow_instance(name: str) -> Path:
    """One bundled WfCommons instance by file name."""
    return resource_path(__name__, "workflows", name)
