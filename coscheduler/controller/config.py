"""What goes into a controller (its knobs) and what comes out of each pass (its report)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import InvalidInput, check_finite


@dataclass(frozen=True)
class ControllerConfig:
    """Knobs of the controller loop (the learner has its own ``LearnerConfig``)."""

    max_guests_per_host: int = 1
    max_candidates_per_guest: int = 4
    decline_cooldown_s: float = 30.0
    max_start_attempts: int = 3
    backfill: bool = True
    # Observe a host's loss as soon as its Hp projects an overrun, once this share of its
    # walltime has passed (early progress rates are noisy).
    early_loss: bool = True
    early_loss_min_elapsed: float = 0.25
    # Report a job failed when no set of the backend's nodes could ever hold it. An
    # offer-based backend (Mesos) sees only the part of the cluster it is offered: there
    # (False) such a job waits, and the free cores (held offers) are kept for it.
    give_up_unplaceable: bool = True

    def __post_init__(self) -> None:
        for name in ("max_guests_per_host", "max_candidates_per_guest", "max_start_attempts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"controller {name} must be an integer >= 1, got {v!r}")
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
