"""Mesos side: a v1 scheduler HTTP API framework with first-fit gang allocation (later issue)."""
