"""The ASA_X learner: experts, the mixture, risk and exponential weights (pure logic)."""

from .asax import AsaxLearner, ClassState, Decision, LearnerConfig, RoundClosed
from .experts import (Expert, FittedTreeExpert, HostState, ThresholdTreeExpert, action_fractions,
                      leaf_distribution, paper_experts)

__all__ = [
    "AsaxLearner", "ClassState", "Decision", "Expert", "FittedTreeExpert", "HostState",
    "LearnerConfig", "RoundClosed", "ThresholdTreeExpert", "action_fractions",
    "leaf_distribution", "paper_experts",
]
