"""The emulated Mesos master's offers: allocation passes (who gets what is the pure
``allocation.plan_offers``), offer timeouts, rescinds and refusal filters.

A mixin of ``master.Master`` (THIS IS AN EMULATOR: see master.py); it holds no state of its own.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .allocation import Candidate, Refusal, plan_offers
from .resources import Resources
from .state import (
    Agent,
    Filter,
    Framework,
    Offer,
)
from .stream import mesos_id as _id

log = logging.getLogger("testbed.mesos")


class OfferCycle:
    """Allocation passes, offers, their timeouts and rescinds, and refusal filters."""

    # ------------------------------------------------------------------------ offers
    def _request_allocation(self) -> None:
        if not self._alloc_pending and not self.closing:
            self._alloc_pending = True
            self.timers.call_later(0.0, self._allocate)

    def _periodic_allocation(self) -> None:
        if self.closing:
            return
        self._allocate()
        self.timers.call_later(self.config.allocation_interval_s, self._periodic_allocation)

    def _allocate(self) -> None:
        with self.lock:
            self._alloc_pending = False
            if self.closing:
                return
            now = time.monotonic()
            fws = [f for f in self.frameworks.values()
                   if f.connected and any(r not in f.suppressed for r in f.roles)]
            if not fws:
                return
            for f in fws:
                f.filters = [x for x in f.filters if x.expires > now]
            total = Resources()
            for a in self.agents.values():
                total = total + a.total
            candidates = [Candidate(f.id, tuple(f.roles), frozenset(f.suppressed), self._allocated(f),
                                    tuple(Refusal(x.agent_id, x.role, x.resources) for x in f.filters))
                          for f in fws]
            agents = [(a.id, a.available()) for a in sorted(self.agents.values(), key=lambda a: a.id)]
            batches: dict[str, list[Offer]] = {}
            for g in plan_offers(agents, candidates, total):
                agent = self.agents[g.agent_id]
                offer = self._make_offer(self.frameworks[g.framework_id], agent, g.role,
                                         agent.available())
                batches.setdefault(g.framework_id, []).append(offer)
            for fid, offers in batches.items():
                fw = self.frameworks[fid]
                self._send(fw, {"type": "OFFERS", "offers": {
                    "offers": [self._offer_json(o) for o in offers]}})

    def _allocated(self, fw: Framework) -> Resources:
        out = Resources()
        for t in fw.tasks.values():
            if not t.released:
                out = out + t.resources
        for oid in fw.offers:
            out = out + self.offers[oid].resources
        return out

    def _make_offer(self, fw: Framework, agent: Agent, role: str, res: Resources) -> Offer:
        oid = f"{self.id}-O{self._seq['offer']}"
        self._seq["offer"] += 1
        offer = Offer(oid, fw.id, agent.id, role, res, time.monotonic())
        self.offers[oid] = offer
        fw.offers.add(oid)
        agent.offered = agent.offered + res
        self.counters["offers"] += 1
        if self.config.offer_timeout_s:
            self.timers.call_later(self.config.offer_timeout_s, lambda: self._offer_timeout(oid))
        return offer

    def _offer_json(self, o: Offer) -> dict[str, Any]:
        agent = self.agents[o.agent_id]
        attrs = [{"name": k, "type": "TEXT", "text": {"value": v}}
                 for k, v in sorted(agent.spec.attributes.items())]
        if agent.runtime.api_url:
            attrs.append({"name": "cosched_agent_url", "type": "TEXT",
                          "text": {"value": agent.runtime.api_url}})
        executors = [_id(eid) for (fid, eid) in agent.executors if fid == o.framework_id]
        return {"id": _id(o.id), "framework_id": _id(o.framework_id), "agent_id": _id(o.agent_id),
                "hostname": agent.hostname, "allocation_info": {"role": o.role},
                "resources": o.resources.to_json(o.role), "attributes": attrs,
                "executor_ids": executors}

    def _offer_timeout(self, oid: str) -> None:
        with self.lock:
            offer = self.offers.get(oid)
            if offer is not None:
                self._rescind(offer, why="offer timeout")

    def _remove_offer(self, offer: Offer) -> None:
        """Withdraw an offer and give its resources back to the agent (no event)."""
        self.offers.pop(offer.id, None)
        fw = self.frameworks.get(offer.framework_id)
        if fw is not None:
            fw.offers.discard(offer.id)
        agent = self.agents.get(offer.agent_id)
        if agent is not None:
            agent.offered = agent.offered - offer.resources

    def _rescind(self, offer: Offer, why: str, refuse_s: float = 0.0) -> None:
        self._remove_offer(offer)
        fw = self.frameworks.get(offer.framework_id)
        if fw is not None:
            self._send(fw, {"type": "RESCIND", "rescind": {"offer_id": _id(offer.id)}})
            if refuse_s > 0:
                self._add_filter(fw, offer.agent_id, offer.role, offer.resources, refuse_s)
        log.info("offer %s rescinded: %s", offer.id, why)
        self._request_allocation()

    def _add_filter(self, fw: Framework, agent_id: str, role: str, res: Resources, secs: float) -> None:
        if secs <= 0 or res.is_empty():
            return
        fw.filters.append(Filter(agent_id, role, res, time.monotonic() + secs))
        # When the filter expires the resources may be offered again.
        self.timers.call_later(secs, self._locked_request_allocation)

    def _locked_request_allocation(self) -> None:
        with self.lock:
            self._request_allocation()
