"""The ASA_X learner: experts, the mixture, risk and exponential weights (pure logic)."""

from .asax import AsaxLearner, ClassState, Decision, LearnerConfig, RoundClosed
from .experts import (EXTRA_EXPERTS, Expert, HostState, IoExpert, PairExpert,
                      ThresholdTreeExpert, action_fractions, extra_expert, leaf_distribution,
                      paper_experts)
from .fitted import FittedTreeExpert

__all__ = [
    "AsaxLearner", "ClassState", "Decision", "EXTRA_EXPERTS", "Expert", "FittedTreeExpert",
    "HostState", "IoExpert", "PairExpert", "extra_expert",
    "LearnerConfig", "RoundClosed", "ThresholdTreeExpert", "action_fractions",
    "leaf_distribution", "paper_experts",
]
