"""Experiments that run the project's real controller and policies on a workload in
virtual time (``paper``: the ASA_X paper's section 4 evaluation)."""
