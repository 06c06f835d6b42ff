"""Prometheus exposition of the agent's samples (read at scrape time, no second copy)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

# (metric suffix, job view key, help)
_JOB_GAUGES = [
    ("cpu_percent", "cpu_percent", "CPU use in percent of the job's allocated cores"),
    ("mem_percent", "mem_percent", "Resident memory in percent of the job's allocation"),
    ("rss_bytes", "rss_bytes", "Resident memory of the job's processes"),
    ("processes", "nprocs", "Live processes of the job"),
    ("tasks_done", "tasks_done", "Tasks the job reported done"),
    ("tasks_per_second", "tasks_per_s", "Recent progress rate"),
    ("happiness", "happiness", "Hp(t): >= 1 likely to finish within walltime"),
    ("cpu_fraction", "cpu_fraction", "Fraction of its allocated cores the job may use"),
    ("quota_microseconds", "quota_us", "CFS quota per period the kernel holds (absent: no limit)"),
]
_JOB_COUNTERS = [
    ("io_read_bytes", "io_read_bytes", "Bytes read by the job's live processes"),
    ("io_write_bytes", "io_write_bytes", "Bytes written by the job's live processes"),
    ("throttled_seconds", "throttled_s", "Time the job's cgroup was throttled"),
]


class AgentCollector:
    def __init__(self, agent):
        self.agent = agent

    def collect(self):
        jobs = self.agent.jobs()
        node = self.agent.node()
        for suffix, key, doc in _JOB_GAUGES:
            g = GaugeMetricFamily(f"cosched_job_{suffix}", doc, labels=["job_id", "status"])
            for j in jobs:
                if j.get(key) is not None:
                    g.add_metric([j["job_id"], j["status"]], float(j[key]))
            yield g
        for suffix, key, doc in _JOB_COUNTERS:
            c = CounterMetricFamily(f"cosched_job_{suffix}", doc, labels=["job_id"])
            for j in jobs:
                if j.get(key) is not None:
                    c.add_metric([j["job_id"]], float(j[key]))
            yield c
        jobs_g = GaugeMetricFamily("cosched_agent_jobs", "Jobs known to the agent", labels=["status"])
        for status, n in node["jobs"].items():
            jobs_g.add_metric([status], n)
        yield jobs_g
        yield GaugeMetricFamily("cosched_agent_leases", "Quota leases in force", value=node["leases"])
        yield CounterMetricFamily("cosched_agent_ticks", "Sampling passes", value=node["ticks"])
        yield GaugeMetricFamily("cosched_agent_last_tick_seconds", "Duration of the last pass",
                                value=node["last_tick_s"])
        yield CounterMetricFamily("cosched_agent_lease_expiries",
                                  "Leases that lapsed and gave a job its full quota back",
                                  value=node["lease_expiries"])
        w = CounterMetricFamily("cosched_agent_cgroup_writes", "cgroup file operations",
                                labels=["result"])
        for k in ("writes", "skipped", "drift_corrected", "errors", "unsupported", "moves"):
            w.add_metric([k], node["writes"][k])
        yield w


def make_registry(agent) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(AgentCollector(agent))
    ProcessCollector(namespace="cosched_agent", registry=reg)
    return reg


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
