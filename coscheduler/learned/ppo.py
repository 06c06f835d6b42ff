"""PPO (clipped objective, early stop on approximate KL) in JAX + optax.

The networks are ``nets.py``'s, written again with ``jax.numpy`` for gradients; the
reference settings (ppo-pick-jobs.py, rl-skip.py): clip 0.2, policy Adam 3e-4, value Adam
1e-3, GAE lambda 0.97, gamma 1 (the reward comes at the end of a sequence), advantages
normalised per epoch, policy iterations stop once the approximate KL passes
1.5 x target_kl (0.01). Full-batch updates as there. Only the rows a step could pick enter the policy's softmax
(a per-step segment softmax), which keeps an update cheap when the window is long but few
jobs can start; the batch is padded to multiples of ``BATCH_ROUND`` steps and
``ROWS_ROUND`` rows with zero-weight entries so that JAX compiles each update a few times
only.

Needs the ``rl`` extra (``pip install .[rl]``); nothing else imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .rollout import Trajectory

BATCH_ROUND = 2048


# An inspector's behaviour cloning aims at the teacher's answer with this much probability
# left on the other one (label smoothing): the clone keeps sampling both answers.
BC_SMOOTHING = 0.1


@dataclass
class PPOConfig:
    clip: float = 0.2
    pi_lr: float = 3e-4
    vf_lr: float = 1e-3
    gamma: float = 1.0
    lam: float = 0.97
    target_kl: float = 0.01
    pi_iters: int = 40
    v_iters: int = 40


def _mlp(params, net, x):
    k = 0
    while f"{net}/{k}/w" in params:
        k += 1
    for i in range(k):
        x = x @ params[f"{net}/{i}/w"] + params[f"{net}/{i}/b"]
        if i < k - 1:
            x = jax.nn.relu(x)
    return x


def rl_row_scores(params, rows):
    return _mlp(params, "pi", rows)[..., 0]


def value_fn(params, pooled):
    return _mlp(params, "v", pooled)[..., 0]


def _rl_logp(pi, rows, seg, chosen, steps):
    """log pi(chosen) per step and the entropy, with the softmax taken per segment
    (the rows one step could pick)."""
    logits = rl_row_scores(pi, rows)
    segments = steps + 1  # the last one collects padding rows
    top = jax.lax.stop_gradient(jax.ops.segment_max(logits, seg, num_segments=segments))
    z = jnp.exp(logits - top[seg])
    lse = jnp.log(jax.ops.segment_sum(z, seg, num_segments=segments)) + top
    lp_rows = logits - lse[seg]
    ent = -jax.ops.segment_sum(jnp.exp(lp_rows) * lp_rows, seg, num_segments=segments)
    return lp_rows[chosen], ent[:steps]


def _inspector_logp(pi, obs, act):
    lp_all = jax.nn.log_softmax(_mlp(pi, "pi", obs), axis=-1)
    lp = jnp.take_along_axis(lp_all, act[:, None], axis=-1)[:, 0]
    return lp, -(jnp.exp(lp_all) * lp_all).sum(-1)


@dataclass
class Batch:
    rows: np.ndarray      # RL: allowed rows of all steps; inspector: one row per step
    seg: np.ndarray       # RL: step of each row
    chosen: np.ndarray    # RL: index of the chosen row; inspector: the action
    pooled: np.ndarray    # value input per step
    logp: np.ndarray
    adv: np.ndarray
    ret: np.ndarray
    weight: np.ndarray
    steps: int


def _round_up(x: int, m: int) -> int:
    return max(m, -(-x // m) * m)


ROWS_ROUND = 8192


class PPO:
    """Holds the parameters and the two Adam states; ``update`` runs one PPO epoch."""

    def __init__(self, kind: str, params: dict, config: PPOConfig | None = None):
        self.kind = kind
        self.config = config or PPOConfig()
        self.reward_scale = 1.0  # rewards are multiplied by it (value learning only)
        self.params = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in params.items()}
        self._pi_keys = sorted(k for k in self.params if k.startswith("pi/"))
        self._v_keys = sorted(k for k in self.params if not k.startswith("pi/"))
        self.pi_opt = optax.adam(self.config.pi_lr)
        self.v_opt = optax.adam(self.config.vf_lr)
        self.pi_state = self.pi_opt.init(self._part(self._pi_keys))
        self.v_state = self.v_opt.init(self._part(self._v_keys))
        clip = self.config.clip
        pi_opt, v_opt = self.pi_opt, self.v_opt
        rl = kind == "rlscheduler"

        def pi_loss(pi, rows, seg, chosen, logp_old, adv, w):
            if rl:
                lp, ent = _rl_logp(pi, rows, seg, chosen, adv.shape[0])
            else:
                lp, ent = _inspector_logp(pi, rows, chosen)
            ratio = jnp.exp(lp - logp_old)
            clipped = jnp.clip(ratio, 1 - clip, 1 + clip) * adv
            total = w.sum()
            loss = -(jnp.minimum(ratio * adv, clipped) * w).sum() / total
            kl = ((logp_old - lp) * w).sum() / total
            return loss, (kl, (ent * w).sum() / total)

        def v_loss(v, pooled, ret, w):
            return (((value_fn(v, pooled) - ret) ** 2) * w).sum() / w.sum()

        @jax.jit
        def pi_step(pi, state, rows, seg, chosen, logp_old, adv, w):
            (loss, (kl, ent)), grads = jax.value_and_grad(pi_loss, has_aux=True)(
                pi, rows, seg, chosen, logp_old, adv, w)
            updates, state = pi_opt.update(grads, state, pi)
            return optax.apply_updates(pi, updates), state, loss, kl, ent

        @jax.jit
        def v_step(v, state, pooled, ret, w):
            loss, grads = jax.value_and_grad(v_loss)(v, pooled, ret, w)
            updates, state = v_opt.update(grads, state, v)
            return optax.apply_updates(v, updates), state, loss

        def bc_loss(pi, rows, seg, chosen, w):
            if rl:
                lp, _ = _rl_logp(pi, rows, seg, chosen, w.shape[0])
            else:
                # the teacher's answer at 1 - BC_SMOOTHING, not 1: a clone that is sure of
                # every answer gives PPO no gradient to move it by (its samples never differ)
                lp_all = jax.nn.log_softmax(_mlp(pi, "pi", rows), axis=-1)
                mine = jnp.take_along_axis(lp_all, chosen[:, None], axis=-1)[:, 0]
                other = jnp.take_along_axis(lp_all, 1 - chosen[:, None], axis=-1)[:, 0]
                lp = (1.0 - BC_SMOOTHING) * mine + BC_SMOOTHING * other
            return -(lp * w).sum() / w.sum()

        @jax.jit
        def bc_step(pi, state, rows, seg, chosen, w):
            loss, grads = jax.value_and_grad(bc_loss)(pi, rows, seg, chosen, w)
            updates, state = pi_opt.update(grads, state, pi)
            return optax.apply_updates(pi, updates), state, loss

        self._bc_step = bc_step
        self._pi_step, self._v_step = pi_step, v_step
        self._pi_eval = jax.jit(pi_loss)
        self._value = jax.jit(value_fn)

    def _part(self, keys):
        return {k: self.params[k] for k in keys}

    def numpy_params(self) -> dict:
        return {k: np.asarray(v, dtype=np.float32) for k, v in self.params.items()}

    def policy_params(self) -> dict:
        return {k: np.asarray(self.params[k], dtype=np.float32) for k in self._pi_keys}

    # -- batches ------------------------------------------------------------------------
    def make_batch(self, trajs: list[Trajectory]) -> Batch:
        cfg = self.config
        trajs = [t for t in trajs if len(t.actions)]
        steps = sum(len(t.actions) for t in trajs)
        B = _round_up(steps, BATCH_ROUND)
        F = trajs[0].obs.shape[1]
        P = trajs[0].pooled.shape[1]
        pooled = np.zeros((B, P), dtype=np.float32)
        chosen = np.zeros(B, dtype=np.int32)
        logp = np.zeros(B, dtype=np.float32)
        weight = np.zeros(B, dtype=np.float32)
        rewards = np.zeros(B, dtype=np.float32)
        if self.kind == "rlscheduler":
            total_rows = sum(len(t.obs) for t in trajs)
            R = _round_up(total_rows + 1, ROWS_ROUND)
            rows = np.zeros((R, F), dtype=np.float32)
            seg = np.full(R, B, dtype=np.int32)   # padding rows: the extra segment
            chosen[:] = R - 1
        else:
            rows = np.zeros((B, F), dtype=np.float32)
            seg = np.zeros(1, dtype=np.int32)
        pos = row = 0
        bounds = []
        for t in trajs:
            T = len(t.actions)
            if self.kind == "rlscheduler":
                r = len(t.obs)
                rows[row:row + r] = t.obs
                seg[row:row + r] = pos + np.repeat(np.arange(T, dtype=np.int32), t.counts)
                offsets = row + np.concatenate([[0], np.cumsum(t.counts)[:-1]])
                chosen[pos:pos + T] = offsets + t.actions
                row += r
            else:
                rows[pos:pos + T] = t.obs
                chosen[pos:pos + T] = t.actions
            pooled[pos:pos + T] = t.pooled
            logp[pos:pos + T] = t.logp
            weight[pos:pos + T] = 1.0
            rewards[pos + T - 1] = t.reward * self.reward_scale
            bounds.append((pos, pos + T))
            pos += T
        values = np.asarray(self._value(self._part(self._v_keys), pooled))
        adv = np.zeros(B, dtype=np.float32)
        ret = np.zeros(B, dtype=np.float32)
        for a, b in bounds:
            r = rewards[a:b].astype(np.float64)
            v = np.append(values[a:b].astype(np.float64), 0.0)
            deltas = r + cfg.gamma * v[1:] - v[:-1]
            adv[a:b] = _discount(deltas, cfg.gamma * cfg.lam)
            ret[a:b] = _discount(r, cfg.gamma)
        real = weight > 0
        mu, sd = adv[real].mean(), adv[real].std()
        adv[real] = (adv[real] - mu) / (sd if sd > 1e-8 else 1.0)
        adv[~real] = 0.0
        return Batch(rows, seg, chosen, pooled, logp, adv, ret, weight, steps)

    # -- one update ---------------------------------------------------------------------
    def update(self, batch: Batch) -> dict:
        cfg = self.config
        pi, v = self._part(self._pi_keys), self._part(self._v_keys)
        args = (batch.rows, batch.seg, batch.chosen, batch.logp, batch.adv, batch.weight)
        loss0, (kl0, ent0) = self._pi_eval(pi, *args)
        iters = 0
        kl = 0.0
        for iters in range(1, cfg.pi_iters + 1):
            # as the reference: one step, then stop once the KL (of the parameters the
            # step started from) exceeds 1.5 x target
            pi, self.pi_state, loss, kl_step, ent = self._pi_step(pi, self.pi_state, *args)
            kl = float(kl_step)
            if kl > 1.5 * cfg.target_kl:
                break
        v_loss = 0.0
        for _ in range(cfg.v_iters):
            v, self.v_state, v_loss = self._v_step(v, self.v_state, batch.pooled, batch.ret,
                                                  batch.weight)
        self.params = {**pi, **v}
        return {"pi_loss": float(loss0), "entropy": float(ent0), "kl": kl,
                "pi_iters": iters, "v_loss": float(v_loss)}

    def imitate(self, batch: Batch, steps: int) -> float:
        """Behaviour cloning: raise log pi of the recorded (teacher's) actions; the value
        network learns the recorded returns at the same time. Returns the last loss."""
        pi, v = self._part(self._pi_keys), self._part(self._v_keys)
        loss = float("nan")
        for _ in range(steps):
            pi, self.pi_state, loss = self._bc_step(pi, self.pi_state, batch.rows, batch.seg,
                                                    batch.chosen, batch.weight)
            v, self.v_state, _ = self._v_step(v, self.v_state, batch.pooled, batch.ret,
                                              batch.weight)
        self.params = {**pi, **v}
        return float(loss)

    # -- checkpoints --------------------------------------------------------------------
    def state_arrays(self) -> dict:
        """Everything needed to resume: parameters and both Adam states, as arrays."""
        out = {f"param:{k}": np.asarray(v) for k, v in self.params.items()}
        for name, st in (("pi", self.pi_state), ("v", self.v_state)):
            for i, leaf in enumerate(jax.tree_util.tree_leaves(st)):
                out[f"opt:{name}:{i}"] = np.asarray(leaf)
        return out

    def load_state_arrays(self, arrays: dict) -> None:
        self.params = {k[6:]: jnp.asarray(v) for k, v in arrays.items() if k.startswith("param:")}
        for name in ("pi", "v"):
            st = self.pi_state if name == "pi" else self.v_state
            leaves, tree = jax.tree_util.tree_flatten(st)
            new = [jnp.asarray(arrays[f"opt:{name}:{i}"], dtype=leaf.dtype)
                   for i, leaf in enumerate(leaves)]
            st = jax.tree_util.tree_unflatten(tree, new)
            if name == "pi":
                self.pi_state = st
            else:
                self.v_state = st


def _discount(x: np.ndarray, factor: float) -> np.ndarray:
    out = np.zeros_like(x)
    acc = 0.0
    for i in range(len(x) - 1, -1, -1):
        acc = x[i] + factor * acc
        out[i] = acc
    return out
