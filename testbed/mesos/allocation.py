"""Which framework gets which agent's free resources: one allocation pass, as pure logic.

Plain data in, plain data out (the master does the bookkeeping and sends the events):

* every agent whose available resources are worth offering (at least 0.01 cpus or 32 MB,
  the hierarchical allocator's default minimum) is offered whole to one framework;
* frameworks are tried in order of their dominant share of the cluster (cpus or mem held
  in tasks and outstanding offers), smallest first, as dominant resource fairness does,
  ties by id; an agent offered to one framework adds to its share for the next agent;
* a framework takes the offer for its first role that is neither suppressed nor filtered
  on that agent; a filter (from DECLINE or the unused part of an ACCEPT) refuses the
  agent's resources while they are a subset of what was refused, so more free resources
  (a task ended) make a new offer even before the filter expires.
"""

from __future__ import annotations

from dataclasses import dataclass

from .resources import Resources, dominant_share


@dataclass(frozen=True)
class Refusal:
    """Resources a framework refused on an agent for a role (an active offer filter)."""

    agent_id: str
    role: str
    resources: Resources


@dataclass
class Candidate:
    """A connected framework as the allocator sees it."""

    id: str
    roles: tuple[str, ...]
    suppressed: frozenset[str]
    held: Resources
    refusals: tuple[Refusal, ...] = ()

    def role_for(self, agent_id: str, available: Resources) -> str | None:
        for role in self.roles:
            if role in self.suppressed:
                continue
            if any(r.agent_id == agent_id and r.role == role and r.resources.contains(available)
                   for r in self.refusals):
                continue
            return role
        return None


@dataclass(frozen=True)
class Grant:
    """Offer ``agent_id``'s available resources to ``framework_id`` for ``role``."""

    framework_id: str
    agent_id: str
    role: str


def plan_offers(agents: list[tuple[str, Resources]], frameworks: list[Candidate],
                total: Resources) -> list[Grant]:
    """One allocation pass over ``agents`` (id, available resources), in the given order."""
    held = {f.id: f.held for f in frameworks}
    out: list[Grant] = []
    for agent_id, available in agents:
        if not available.allocatable():
            continue
        for fw in sorted(frameworks, key=lambda f: (dominant_share(held[f.id], total), f.id)):
            role = fw.role_for(agent_id, available)
            if role is None:
                continue
            out.append(Grant(fw.id, agent_id, role))
            held[fw.id] = held[fw.id] + available
            break
    return out
