"""Multi-resource scheduling: nodes, a shared burst buffer and a power budget.

- ``workload``: MRSch's S1-S10 job sets built from any SWF trace and a seed, and their
  file format (SWF plus three columns);
- ``optimiser``: the MultiSched/ROME window optimiser (Pareto sets over the resources'
  utilisations, exhaustive or NSGA-II) and ROME's decision maker;
- ``mrsch``: the MRSch direct-future-prediction network, its features, Eq. (1) goal
  vector and numpy inference;
- ``selectors``: the methods as decision rules for the simulator engine;
- ``report``: ``cosched simulate multi`` (table, Kiviat charts, goal-vector trace).

The simulator itself (``coscheduler/sim``) checks every resource; see ``sim/resources.py``.
"""
