"""MRSch (Li et al.): a direct-future-prediction (DFP) agent for multi-resource scheduling.

Inputs at each pick (``ChoiceView`` of the simulator's selection seam, pools in ``extra``):

- **state** (MLP): the window, W = 10 jobs in FCFS order (MRSch's; a model trained with
  another ``window_order``, e.g. SJF, is cut from the queue in that order), each as (R + 2) numbers: its
  share of each resource's capacity (nodes, then every pool), its estimate and its wait
  (both ``log1p(seconds / 60) / log1p(7 days in minutes)``, clipped to [0, 1]); then
  per-unit availability of every resource, each unit as (available now 0/1, time until it
  is free by running jobs' estimated ends, same scale). A node is a unit (machines above
  512 nodes are grouped into 512 units); each pool is cut into ``POOL_UNITS`` = 64 equal
  units (MRSch used 1 TB units of Theta's 1.26 PB; our pools are scaled, so 64 units keep
  the input small). Units are listed free first, then by the time they free up.
- **measurement**: the current utilisations (busy nodes / nodes, used / capacity for every
  pool; power counts the draw above idle against the budget above the all-idle draw).
- **goal**: MRSch's Eq. (1), ``r_j = sum_i P_ij t_i / sum_j sum_i P_ij t_i`` over running
  jobs (t = remaining estimate) and waiting jobs (t = estimate), P_ij = job i's share of
  resource j. A *fixed* goal (equal weights) makes the scalar-reward baseline.

The network predicts, for every window position (action), the change of every measurement
after each of ``OFFSETS`` = (1, 2, 4, 8, 16, 32) later picks; the agent takes the runnable
job with the largest ``sum_tau c_tau sum_j g_j pred[a, tau, j]``, ``c`` = DFP's temporal
weights (0, 0, 0, 0.5, 0.5, 1). Reservation as in the paper (section III-C): the agent
selects from the window; a selected job that fits starts and the agent selects again;
the first selected job that does not fit is reserved, and its resources are held for it
at the earliest time it fits (it keeps the reservation until it starts). Meanwhile EASY
backfilling runs with the agent choosing among EASY's candidates (``"backfill"`` views:
the first W jobs that may start now without delaying the reserved one), as DRAS, the
CQSim agent MRSch builds on, chooses its backfilled jobs.

Architecture (scaled down from the paper's 4,000/1,000/512 units so that a model stays
under 1 MB): state MLP S -> 128 -> 64 -> 64, measurement and goal MLPs R -> 32 -> 32 -> 32
(leaky ReLU, slope 0.2), joint 128 -> expectation stream 64 -> T*R and action stream
64 -> W*T*R, the action stream centred over actions (DFP's dueling form).

``forward`` is written once over an array module (numpy or jax.numpy): inference needs
numpy only and training (``train.py``, JAX) differentiates the very same function.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# One model-file layout for every learned scheduler (magic line, JSON header, npz weights).
from ..learned.modelfile import ModelError, read_model_file, write_model_file
from ..model import InvalidInput
from ..policies.selection import ChoiceView, Scorer
from ..policies.queue import POLICIES, QueuePolicy

KIND = "mrsch"
WINDOW = 10
OFFSETS = (1, 2, 4, 8, 16, 32)
TEMPORAL = (0.0, 0.0, 0.0, 0.5, 0.5, 1.0)
POOL_UNITS = 64
MAX_NODE_UNITS = 512
TIME_SCALE_MIN = 7 * 24 * 60  # one week, in minutes
LEAK = 0.2
STATE_HIDDEN = (128, 64, 64)
SIDE_HIDDEN = (32, 32, 32)
STREAM_HIDDEN = 64

def _time_feature(seconds: np.ndarray) -> np.ndarray:
    x = np.log1p(np.maximum(seconds, 0.0) / 60.0) / math.log1p(TIME_SCALE_MIN)
    return np.minimum(x, 1.0)


def _unit_times(free: float, cap: float, units: int, remaining: np.ndarray,
                amount: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(available, time until free) of ``units`` equal units of a resource.

    ``remaining`` (seconds until each running job's estimated end, >= 0) and ``amount``
    (what it holds) describe running jobs; unit k is free once ``(k + 1) * cap / units``
    fits in what is free then.
    """
    size = cap / units
    need = (np.arange(units) + 1) * size - 1e-9
    avail = need <= free
    order = np.argsort(remaining, kind="stable")
    freed = free + np.cumsum(amount[order])
    k = np.searchsorted(freed, need, side="left")
    rem = np.append(remaining[order], remaining.max() if len(remaining) else 0.0)
    t = np.where(avail, 0.0, rem[np.minimum(k, len(remaining))])
    return avail.astype(float), _time_feature(t)


def pool_info(view: ChoiceView) -> dict:
    extra = view.extra
    if "pool_take" not in extra:
        raise InvalidInput("MRSch and the window optimiser need a multi-resource replay "
                           "(a workload with burst buffer or power requests)")
    return extra


def measurement(view: ChoiceView) -> np.ndarray:
    """Utilisations now: nodes, then every pool."""
    e = pool_info(view)
    cap = e["pool_cap"].astype(float)
    return np.concatenate([[1.0 - view.free_nodes / view.total_nodes],
                           1.0 - e["pool_free"] / np.maximum(cap, 1.0)])


def goal_vector(view: ChoiceView) -> np.ndarray:
    """MRSch's Eq. (1) over running and waiting jobs (uniform when nothing is in)."""
    e = pool_info(view)
    cap = np.concatenate([[view.total_nodes], e["pool_cap"]]).astype(float)
    cap = np.maximum(cap, 1.0)
    remaining = np.maximum(view.running_end - view.now, 0.0)
    running = np.column_stack([view.running_need, e["running_take"]]) / cap
    queued = np.column_stack([e["queue_need"], e["queue_take"]]) / cap
    demand = remaining @ running + e["queue_estimate"] @ queued
    total = demand.sum()
    if not total > 0:
        return np.full(len(cap), 1.0 / len(cap))
    return demand / total


def state_features(view: ChoiceView, window: int = WINDOW) -> np.ndarray:
    """The state module's input (see the module doc); its length is ``state_size``."""
    e = pool_info(view)
    pools = len(e["pool_cap"])
    cap = np.concatenate([[view.total_nodes], e["pool_cap"]]).astype(float)
    cap = np.maximum(cap, 1.0)
    rows = np.zeros((window, 3 + pools))
    n = min(view.size, window)
    if n:
        rows[:n, 0] = view.need[:n] / cap[0]
        rows[:n, 1:1 + pools] = e["pool_take"][:n] / cap[1:]
        rows[:n, 1 + pools] = _time_feature(view.estimate[:n])
        rows[:n, 2 + pools] = _time_feature(view.now - view.submit[:n])
    remaining = np.maximum(view.running_end - view.now, 0.0)
    parts = [rows.ravel()]
    node_units = min(view.total_nodes, MAX_NODE_UNITS)
    avail, t = _unit_times(view.free_nodes, view.total_nodes, node_units, remaining,
                           view.running_need.astype(float))
    parts += [avail, t]
    for p in range(pools):
        avail, t = _unit_times(float(e["pool_free"][p]), float(cap[1 + p]), POOL_UNITS,
                               remaining, e["running_take"][:, p].astype(float))
        parts += [avail, t]
    return np.concatenate(parts)


def state_size(total_nodes: int, pools: int, window: int = WINDOW) -> int:
    return window * (3 + pools) + 2 * min(total_nodes, MAX_NODE_UNITS) + 2 * POOL_UNITS * pools


# ---------------------------------------------------------------------------------------
# The network, over an array module ``xp`` (numpy for inference, jax.numpy for training).

def _dense(xp, params: dict, net: str, x, last_linear: bool):
    k = 0
    while f"{net}/{k}/w" in params:
        x = x @ params[f"{net}/{k}/w"] + params[f"{net}/{k}/b"]
        last = f"{net}/{k + 1}/w" not in params
        if not (last and last_linear):
            x = xp.where(x > 0, x, LEAK * x)
        k += 1
    return x


def forward(params: dict, state, meas, goal, *, window: int, measures: int, xp=np):
    """Predicted measurement changes, shape (..., window, len(OFFSETS), measures)."""
    s = _dense(xp, params, "s", state, last_linear=False)
    m = _dense(xp, params, "m", meas, last_linear=False)
    g = _dense(xp, params, "g", goal, last_linear=False)
    joint = xp.concatenate([s, m, g], axis=-1)
    t = len(OFFSETS)
    expectation = _dense(xp, params, "e", joint, last_linear=True)
    action = _dense(xp, params, "a", joint, last_linear=True)
    lead = action.shape[:-1]
    action = action.reshape(*lead, window, t * measures)
    action = action - action.mean(axis=-2, keepdims=True)
    pred = expectation[..., None, :] + action
    return pred.reshape(*lead, window, t, measures)


def init_params(rng: np.random.Generator, state_len: int, measures: int,
                window: int = WINDOW) -> dict:
    """Glorot-uniform weights, zero biases."""
    params: dict[str, np.ndarray] = {}
    t = len(OFFSETS)

    def layers(net: str, sizes: list[int]) -> None:
        for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            limit = math.sqrt(6.0 / (a + b))
            params[f"{net}/{k}/w"] = rng.uniform(-limit, limit, (a, b)).astype(np.float32)
            params[f"{net}/{k}/b"] = np.zeros(b, dtype=np.float32)

    layers("s", [state_len, *STATE_HIDDEN])
    layers("m", [measures, *SIDE_HIDDEN])
    layers("g", [measures, *SIDE_HIDDEN])
    joint = STATE_HIDDEN[-1] + 2 * SIDE_HIDDEN[-1]
    layers("e", [joint, STREAM_HIDDEN, t * measures])
    layers("a", [joint, STREAM_HIDDEN, window * t * measures])
    return params


def objective(pred: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """Goal-weighted predicted outcome per action: sum_tau c_tau sum_j g_j pred."""
    return np.einsum("...atj,t,...j->...a", pred, np.asarray(TEMPORAL), goal)


# ---------------------------------------------------------------------------------------
# Model files: the learned schedulers' layout (magic line, one JSON header line, npz).

@dataclass
class MRSchModel:
    params: dict[str, np.ndarray]
    header: dict = field(default_factory=dict)
    path: str | None = None

    @property
    def name(self) -> str:
        return self.header.get("name") or (Path(self.path).stem if self.path else KIND)

    @property
    def window(self) -> int:
        return int(self.header["window"])

    @property
    def measures(self) -> int:
        return 1 + len(self.header["pools"])


def save_model(model: MRSchModel, path: str | Path) -> Path:
    return write_model_file({**model.header, "kind": KIND}, model.params, path)


def load_model(path: str | Path) -> MRSchModel:
    """Read an MRSch model file; anything else gets a ``ModelError`` naming the file."""
    name, header, params = read_model_file(path)
    if header.get("kind") != KIND:
        raise ModelError(f"{name}: is a {header.get('kind')!r} model, an {KIND} model is "
                         "needed here")
    for key in ("window", "pools", "state_size", "nodes", "goal"):
        if key not in header:
            raise ModelError(f"{name}: the header lacks {key!r}")
    if "s/0/w" not in params or params["s/0/w"].shape[0] != header["state_size"]:
        raise ModelError(f"{name}: the state input layer is missing or differs from the "
                         f"header's state_size {header['state_size']}")
    if not all(np.isfinite(v).all() for v in params.values()):
        raise ModelError(f"{name}: the weights hold NaN or infinite values")
    return MRSchModel(params, header, name)


def check_model_for(model: MRSchModel, set_name: str, goal: str) -> None:
    """ModelError naming the file when ``model`` was trained for another job set or goal
    than it is asked to play (a file renamed or copied over another: the machine and the
    pools may match while the jobs it learned from do not)."""
    h = model.header
    trained = h.get("set")
    if trained is not None and trained != set_name:
        raise ModelError(f"{model.name}: trained on job set {trained!r}, asked to play "
                         f"{set_name!r}")
    if h.get("goal") != goal:
        raise ModelError(f"{model.name}: trained with the {h.get('goal')!r} goal, asked "
                         f"for the {goal!r} one ({'mrsch' if goal == 'dynamic' else 'scalar-rl'})")


# ---------------------------------------------------------------------------------------
# The agent as a selector of the simulator's selection seam.

def window_order(name: str) -> QueuePolicy:
    """The queue order an agent's window is cut from, by name (FCFS: MRSch's)."""
    if not isinstance(name, str) or name.strip().upper() not in POLICIES:
        raise InvalidInput(f"unknown window order {name!r}; valid: {', '.join(POLICIES)}")
    return POLICIES[name.strip().upper()]


class MRSchAgent(Scorer):
    """Picks the runnable window job with the best goal-weighted predicted future.

    Its first pick that does not fit becomes the reserved head, whose resources are "held
    for its execution at the earliest available time" (MRSch, section III-C): it keeps its
    reservation until it starts (as DRAS's ``reserve_job_id`` on CQSim), and only then is
    the agent asked for a new head; meanwhile it chooses among EASY's backfill candidates
    (``backfill_choice``). ``mask`` "padding" (the paper; what ``train`` uses) lets it
    select any window job; "runnable" (the first shipped models) only jobs that fit while
    one does. Both default to what the model's header says it was trained with.

    ``goal="dynamic"`` uses Eq. (1) at every pick (MRSch); ``goal="fixed"`` uses equal
    weights (the scalar-reward baseline, 0.5/0.5 with two resources). ``epsilon`` > 0
    explores (training). ``record`` keeps (state, measurement, goal, action) per pick for
    training; ``goal_trace`` keeps (time, goal vector) for the Fig. 8-style plot;
    ``timings`` the seconds each pick took.
    """

    def __init__(self, model: MRSchModel, *, goal: str | None = None, epsilon: float = 0.0,
                 seed: int = 0, record: bool = False, goal_trace: bool = False,
                 name: str | None = None, mask: str | None = None,
                 backfill_choice: bool | None = None):
        # As the model was trained (its header; models without these keys predate them:
        # "runnable" mask, backfilling in queue order), unless given.
        mask = mask or model.header.get("mask", "runnable")
        super().__init__(name or f"mrsch:{model.name}", model.window, mask)
        # The window is cut from the queue in this order (models without the key: FCFS).
        self.queue_policy = window_order(model.header.get("window_order", "FCFS"))
        self.backfill_choice = bool(model.header.get("backfill_choice", False)
                                    if backfill_choice is None else backfill_choice)
        self.model = model
        self.params = model.params
        self.goal_mode = goal or model.header.get("goal", "dynamic")
        if self.goal_mode not in ("dynamic", "fixed"):
            raise InvalidInput(f"unknown goal mode {self.goal_mode!r}; use dynamic or fixed")
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)
        self.record = [] if record else None
        self.goal_trace = [] if goal_trace else None
        self.timings: list[float] = []      # wall seconds per pick
        self.cpu_timings: list[float] = []  # CPU seconds of this thread per pick
        self.checked = False

    def _check(self, view: ChoiceView) -> None:
        e = pool_info(view)
        h = self.model.header
        names = list(e["pool_names"])
        if names != list(h["pools"]) or view.total_nodes != h["nodes"]:
            raise InvalidInput(
                f"{self.model.path or self.model.name}: trained for {h['nodes']} nodes and "
                f"pools {h['pools']}, this replay has {view.total_nodes} nodes and pools {names}")
        self.checked = True

    def scores(self, view: ChoiceView) -> np.ndarray:
        s = state_features(view, self.window)
        m = measurement(view)
        g = goal_vector(view) if self.goal_mode == "dynamic" else np.full(len(m), 1 / len(m))
        if not (np.isfinite(s).all() and np.isfinite(m).all() and np.isfinite(g).all()):
            # NaN scores would pick window position 0 without a word
            raise ModelError(f"{self.model.path or self.model.name}: NaN or infinite features "
                             f"at time {view.now} (a job with a NaN submit time, estimate or "
                             "size?); the model cannot score them")
        pred = forward(self.params, s, m, g, window=self.window, measures=len(m))
        self._last = (s, m, g)
        return objective(pred, g)[:view.size]

    def choose(self, view: ChoiceView) -> int:
        t0, c0 = time.perf_counter(), time.thread_time()
        if not self.checked:
            self._check(view)
        # "padding" (the paper): any window job; the first pick that does not fit is
        # reserved ("this next job is then marked as reserved"). "runnable": only jobs
        # that fit while some does. Backfill views hold only jobs EASY lets start now.
        if self.mask == "padding" or view.kind == "backfill":
            allowed = np.ones(view.size, dtype=bool)
        else:
            runnable = view.runnable
            allowed = runnable if runnable.any() else np.ones(view.size, dtype=bool)
        scores = self.scores(view)
        if self.epsilon > 0 and self.rng.random() < self.epsilon:
            pick = int(self.rng.choice(np.flatnonzero(allowed)))
        else:
            pick = int(np.argmax(np.where(allowed, scores, -np.inf)))
        if self.record is not None:
            s, m, g = self._last
            self.record.append((s, m, g, pick))
        if self.goal_trace is not None:
            self.goal_trace.append((view.now, self._last[2]))
        self.timings.append(time.perf_counter() - t0)
        self.cpu_timings.append(time.thread_time() - c0)
        return pick
