"""Our Montage and BLAST stage grouping agrees with WfCommons' recipes (task types, order)."""

import pytest

from coscheduler.workloads.definitions import StageSpec, WorkflowSpec, get_workflow
from coscheduler.workloads.recipes import RECIPES, recipe_edges, stage_order_problems


@pytest.mark.parametrize("workflow", sorted(RECIPES))
def test_stage_grouping_matches_the_recipe(workflow):
    types, edges = recipe_edges(workflow)
    assert len(types) >= 3 and edges
    assert stage_order_problems(workflow) == []


def test_a_wrong_grouping_is_caught():
    spec = get_workflow("blast")
    swapped = WorkflowSpec(spec.name, spec.description, tuple(reversed(spec.stages)),
                           spec.paper_cpu_util, spec.paper_mem_util, spec.paper_runtime_h)
    assert any("comes later" in p for p in stage_order_problems(swapped))
    partial = WorkflowSpec(spec.name, spec.description,
                           (StageSpec(spec.stages[0].name, spec.stages[0].stage_type,
                                      spec.stages[0].groups),),
                           spec.paper_cpu_util, spec.paper_mem_util, spec.paper_runtime_h)
    assert "recipe task type cat_blast is in no stage" in stage_order_problems(partial)


def test_no_recipe_for_statistics():
    with pytest.raises(ValueError, match="no WfCommons recipe"):
        recipe_edges("statistics")
