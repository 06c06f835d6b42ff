"""What goes into a controller (its knobs) and what comes out of each pass (its report)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import InvalidInput, check_finite
from ..policies.lending import DEFAULT_MIN_SHARE


@dataclass(frozen=True)
class ControllerConfig:
    """Knobs of the controller loop (the learner has its own ``LearnerConfig``)."""

    # Guests a host may hold at once, each on its own share of the host's cores, so that a
    # core is never shared by more than two jobs (the paper's pairs). None: as many as the
    # host's cores hold.
    max_guests_per_host: int | None = None
    # Hosts the policy is asked about per guest per pass. None: every running host the guest
    # fits in (as the paper's framework offered them); a host is still asked at most once
    # per pass, so a pass asks at most as many questions as there are hosts.
    max_candidates_per_guest: int | None = None
    # A job that was a guest may host once its own host has ended (it then holds its cores
    # alone, like any job). False restores the older rule "guests never host".
    former_guests_host: bool = True
    decline_cooldown_s: float = 30.0
    max_start_attempts: int = 3
    backfill: bool = True
    # Observe a host's loss as soon as its Hp projects an overrun, once this share of its
    # walltime has passed (early progress rates are noisy).
    early_loss: bool = True
    early_loss_min_elapsed: float = 0.25
    # False (the paper's section 3): a decision's loss is its host's (degradation against
    # its class's runtime alone, else its walltime loss), observed when the host ends.
    # True: the larger of the host's and the guest's, observed when the first of the two
    # ends (the other's projected from its progress).
    pair_loss: bool = False
    # Close the learner's round of a host's class when that host ends (each host job's
    # co-allocations are one pass of Algorithm 1's inner loop), besides the risk threshold.
    round_per_host: bool = True
    # Say why each job left queued was not co-allocated (PassReport.refused). O(queued x
    # running) per pass: a diagnostic for simulations and operators, off by default.
    explain: bool = False
    # Report a job failed when no set of the backend's nodes could ever hold it. An
    # offer-based backend (Mesos) sees only the part of the cluster it is offered: there
    # (False) such a job waits, and the free cores (held offers) are kept for it.
    give_up_unplaceable: bool = True
    # A node's memory (MB) and node-local burst buffer (GB): a guest's requests must fit
    # beside its host's (and the host's other guests') on them. None: not checked.
    node_mem_mb: int | None = None
    node_bb_gb: int | None = None
    # A policy that lends only idle CPU (``policy.idle_only``, ASA_X): the headroom kept
    # above a host's measured use, as a share of its cores, and the hysteresis band of the
    # per-tick revision (policies.lending).
    lend_margin: float = 0.1
    lend_hysteresis: float = 1.0
    # No loan below this share of the guest's need: the guest waits for a host with more
    # idle CPU, or for cores of its own (policies.lending).
    lend_min_share: float = DEFAULT_MIN_SHARE
    # A host not sampled yet (a node agent's first sample of a job comes a tick or two
    # after its start) is taken to use what its job class usually uses (``ClassUsage``),
    # when that is known; the next sample revises its guests' quotas as usual. False: an
    # unsampled host lends nothing (then stages shorter than two ticks never host).
    lend_unsampled_by_class: bool = True
    # "share": every loan of at least lend_min_share of the guest's need is made. "sooner":
    # a loan short of the guest's need is made only if the guest, running slower as a
    # guest, is estimated to end no later than by waiting for cores of its own
    # (policies.lending.least_paying_speed; estimates from walltimes, as EASY's).
    lend_rule: str = "share"
    # A parallel stage that finds no single host may run as two parts, each a guest of
    # its own host (policies.span; issue #19's "guest spanning two hosts"), on a backend
    # that can split a queued job (``split``: the virtual one). Off: the paper's rule.
    span_hosts: bool = False

    def __post_init__(self) -> None:
        from ..policies.lending import (check_hysteresis, check_lend_rule, check_margin,
                                        check_min_share)
        check_margin(self.lend_margin, "controller lend_margin")
        check_min_share(self.lend_min_share, "controller lend_min_share")
        check_lend_rule(self.lend_rule, "controller lend_rule")
        check_hysteresis(self.lend_hysteresis, "controller lend_hysteresis")
        for name in ("max_guests_per_host", "max_candidates_per_guest", "max_start_attempts"):
            v = getattr(self, name)
            if v is None and name != "max_start_attempts":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"controller {name} must be an integer >= 1, got {v!r}")
        for name in ("node_mem_mb", "node_bb_gb"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidInput(f"controller {name} must be an integer >= 1 or None, got {v!r}")
        if not isinstance(self.span_hosts, bool):
            raise InvalidInput(f"controller span_hosts must be true or false, got {self.span_hosts!r}")
        check_finite(self.decline_cooldown_s, "controller decline_cooldown_s", minimum=0.0)
        check_finite(self.early_loss_min_elapsed, "controller early_loss_min_elapsed", minimum=0.0)


@dataclass
class PassReport:
    """What one pass did (for logs, tests and the benchmark)."""

    time: float
    duration_s: float = 0.0
    finished: int = 0
    started: int = 0           # space-shared starts
    coallocated: int = 0       # guests started inside a host
    declined: int = 0          # ASA_X a_0 decisions
    observed: int = 0          # losses fed to the learner
    cancelled: int = 0         # decisions resolved as cancelled
    failed: list[str] = field(default_factory=list)   # jobs reported failed by the controller
    reservation: tuple[str, float] | None = None      # (job id, shadow time) under EASY
    errors: list[str] = field(default_factory=list)
    unwritten: int = 0         # records the recorder could not write yet (they wait, in order)
    # With ControllerConfig.explain: job id -> the rule that kept it from every host
    # (controller.hosts.REFUSALS) for each queued job this pass neither started nor hosted.
    refused: dict[str, str] = field(default_factory=dict)
