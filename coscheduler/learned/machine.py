"""The machine a learned queue model was trained for, checked wherever it schedules a trace.

A model's features divide by the machine's size (``features.py``: a job's nodes and the
free nodes as shares of the machine), and the release gate's verdict holds for the
machine it was measured on; so a model trained for 256 nodes ranks the jobs of a
240-node trace by features it never saw. Its header records the machine
(``"machine": {"nodes": N, "procs_per_node": P}``: training writes it; the shipped models
carry the one their gate report names), and every replay of a trace with a learned model
(``cosched simulate swf``, ``simulate learned``, the gate, ``evaluate``) refuses another
machine in one ``ModelError`` naming the file and both machines.

A model without ``machine`` (trained before training wrote it) is accepted, as the gate
accepts it. The cross-trace table of ``simulate learned`` runs a model on other traces on
purpose (``other_machine=True`` in ``evaluate.window_bsld``). The live orders (``cosched
run``, ``simulate paper``, the Slurm priority hook) are not checked: they see the machine
in cores, as the CPUs usable at that pass, which change as nodes drain or join.
"""

from __future__ import annotations

from pathlib import Path

from ..sim.cluster import Cluster
from ..sim.swf import SwfTrace
from .modelfile import Model, ModelError

KEYS = ("nodes", "procs_per_node")


def machine_of(trace: SwfTrace) -> dict:
    """``{"nodes", "procs_per_node"}`` of the machine a trace's header describes."""
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    return {"nodes": cluster.nodes, "procs_per_node": cluster.procs_per_node}


def model_file(model: Model) -> str:
    """What an error calls a model: its file, else its name (a model not yet saved)."""
    return model.path or model.name


def header_machine(model: Model) -> dict | None:
    """The machine the model's header records, None for a model without one; a header
    whose ``machine`` is not two positive integers is a ``ModelError`` naming the file."""
    want = model.header.get("machine")
    if want is None:
        return None
    if not isinstance(want, dict) or set(want) != set(KEYS) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in want.values()):
        raise ModelError(f"{model_file(model)}: the header's machine {want!r} is not "
                         "{\"nodes\": N, \"procs_per_node\": P} with N, P >= 1")
    return want


def require_machine(model: Model, have: dict, where: str) -> None:
    """Refuse ``model`` on machine ``have`` (``where`` names it, e.g. the trace's file)
    unless its header records that machine or none."""
    want = header_machine(model)
    if want is not None and want != have:
        raise ModelError(f"{model_file(model)}: trained for a machine of "
                         f"{want['nodes']} nodes x {want['procs_per_node']} processors, but "
                         f"{where} has {have['nodes']} x {have['procs_per_node']}; use a "
                         "model trained for this machine")


def check_machine(model: Model, trace: SwfTrace) -> None:
    """Refuse ``model`` on ``trace`` if its header records another machine than the trace's."""
    require_machine(model, machine_of(trace), Path(trace.path).name)


def check_selector(policy: object, trace: SwfTrace) -> None:
    """``check_machine`` for a learned selector (anything holding a loaded ``Model`` as
    ``model``, the scorers and inspectors of ``selectors.py``); other policies pass."""
    model = getattr(policy, "model", None)
    if isinstance(model, Model):
        check_machine(model, trace)
