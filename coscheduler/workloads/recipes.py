"""Our stage grouping checked against WfCommons' workflow recipes (``wfcommons.wfchef``).

WfCommons ships, for Montage and BLAST, recipes built from many measured runs: the task
types and how they depend on each other. ``recipe_edges`` generates a workflow from a recipe
(offline: the recipes carry their data) and returns its task-type dependency edges;
``stage_order_problems`` says where our definitions (several task types per stage job)
disagree with them: a task type we lack, one the recipe does not know, or a dependency that
would point from a later stage back to an earlier one.
"""

from __future__ import annotations

import logging
import re

from .definitions import WorkflowSpec, get_workflow

RECIPES = {"montage": "MontageRecipe", "blast": "BlastRecipe"}
_SUFFIX = re.compile(r"_0*\d+$")   # generated task names are TYPE_00000012


def recipe_edges(workflow: str, num_tasks: int = 200) -> tuple[set[str], set[tuple[str, str]]]:
    """Task types of ``workflow``'s WfCommons recipe and the (parent, child) type edges of a
    workflow of about ``num_tasks`` tasks generated from it."""
    if workflow not in RECIPES:
        raise ValueError(f"no WfCommons recipe for {workflow!r}; recipes: {sorted(RECIPES)}")
    from wfcommons import WorkflowGenerator  # heavy import: only when asked
    from wfcommons.wfchef import recipes

    logging.getLogger("wfcommons").setLevel(logging.WARNING)
    recipe = getattr(recipes, RECIPES[workflow]).from_num_tasks(num_tasks)
    wf = WorkflowGenerator(recipe).build_workflow()
    kind = {tid: _SUFFIX.sub("", tid) for tid in wf.tasks}
    edges = {(kind[a], kind[b]) for a, b in wf.edges if kind[a] != kind[b]}
    return set(kind.values()), edges


def stage_order_problems(spec: WorkflowSpec | str, num_tasks: int = 200) -> list[str]:
    """Where the stage grouping disagrees with the recipe ([] when it agrees)."""
    spec = get_workflow(spec) if isinstance(spec, str) else spec
    types, edges = recipe_edges(spec.name, num_tasks)
    stage_of = {g.name: i for i, st in enumerate(spec.stages) for g in st.groups}
    problems = [f"recipe task type {t} is in no stage" for t in sorted(types - set(stage_of))]
    problems += [f"task type {t} is not in the WfCommons recipe" for t in sorted(set(stage_of) - types)]
    for parent, child in sorted(edges):
        if parent in stage_of and child in stage_of and stage_of[parent] > stage_of[child]:
            problems.append(f"{child} (stage {stage_of[child]}) depends on {parent} "
                            f"(stage {stage_of[parent]}), which comes later")
    return problems
