"""The experts' keyed answers for a host state in one call, as the learner asks them for
every decision (``AsaxLearner._mix``): the paper's hand-made trees read inline, with the Hp
bin they share found once, other experts through their own ``keyed_distribution``. Pure.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, Sequence

from ..model import StageType
from .experts import HP_EDGES, HP_UNKNOWN_BIN, Expert, HostState, ThresholdTreeExpert


def keyed_answers(experts: Sequence[Expert]
                  ) -> Callable[[HostState], tuple[tuple, list[tuple[float, ...]]]] | None:
    """One function giving every expert's ``keyed_distribution`` for a state, as (the keys,
    the distributions), or None when some expert has none. The hand-made trees
    (``ThresholdTreeExpert`` itself, not a subclass with its own rule) are read inline,
    with the Hp bin they share found once: the learner asks this for every decision."""
    fns = [getattr(e, "keyed_distribution", None) for e in experts]
    if not all(fns):
        return None
    specs: list = [(e.metric, e.edges, e._leaves) if type(e) is ThresholdTreeExpert else f
                   for e, f in zip(experts, fns)]

    def answers(state: HostState) -> tuple[tuple, list[tuple[float, ...]]]:
        hp = state.happiness
        h = HP_UNKNOWN_BIN if hp is None else bisect_right(HP_EDGES, hp)
        keys, dists = [], []
        for spec in specs:
            if type(spec) is not tuple:
                key, dist = spec(state)
            else:
                metric, edges, leaves = spec   # (ThresholdTreeExpert.leaf_index, inline)
                if metric == "stage_type":
                    v = 1.0 if state.stage_type is StageType.PARALLEL else 0.0
                else:
                    v = getattr(state, metric)
                    if type(v) is not float:
                        v = float(v)
                k = bisect_right(edges, v)
                key, dist = (k, h), leaves[k][h]
            keys.append(key)
            dists.append(dist)
        return tuple(keys), dists

    return answers


__all__ = ["keyed_answers"]
