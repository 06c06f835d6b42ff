"""The networks' forward passes in numpy (inference needs nothing else).

Parameters are a dict ``{"pi/0/w": ..., "pi/0/b": ..., ...}``: layer k of network
``pi`` (policy) or ``v`` (value) has weight ``w`` (in x out) and bias ``b``; hidden layers
use ReLU, the last layer is linear. The training code (``ppo.py``, JAX) computes exactly
these functions; tests check that both agree to 1e-6.

- RLScheduler's policy is the *kernel* network: one MLP (features -> 32 -> 16 -> 8 -> 1)
  applied to every window row with shared weights; its outputs are the job scores, and
  the policy is the softmax over the allowed rows. Its value network is an MLP
  (pooled -> 32 -> 16 -> 1) over the window's pooled features (``rl_pooled``: mean and max
  of each feature over the real rows, the share of the window filled and the share of
  rows allowed): cheap, and blind to padding.
- SchedInspector's policy is an MLP (features -> 32 -> 16 -> 8 -> 2): logits of
  (accept, reject); its value network an MLP (features -> 32 -> 16 -> 8 -> 1).
"""

from __future__ import annotations

import numpy as np

RL_PI_HIDDEN = (32, 16, 8)
RL_V_HIDDEN = (32, 16)
INSPECTOR_HIDDEN = (32, 16, 8)
NEG = -1e9  # logit of a masked action


def layer_count(params: dict, net: str) -> int:
    k = 0
    while f"{net}/{k}/w" in params:
        k += 1
    return k


def mlp(params: dict, net: str, x: np.ndarray) -> np.ndarray:
    """Dense layers ``net/0 .. net/L-1`` over the last axis of ``x``; ReLU between."""
    count = layer_count(params, net)
    for k in range(count):
        x = x @ params[f"{net}/{k}/w"] + params[f"{net}/{k}/b"]
        if k < count - 1:
            x = np.maximum(x, 0.0)
    return x


def kernel_scores(params: dict, obs: np.ndarray) -> np.ndarray:
    """Scores of every row of ``obs`` (... x W x F) -> (... x W)."""
    return mlp(params, "pi", obs)[..., 0]


def masked_log_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask, logits, NEG)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def rl_pooled(obs: np.ndarray, n: int, allowed: int, window: int) -> np.ndarray:
    """The value network's input: mean and max of each feature over the ``n`` real rows,
    ``n / window`` and ``allowed / window``."""
    rows = obs[:max(n, 1)]
    return np.concatenate([rows.mean(axis=0), rows.max(axis=0),
                           [n / window, allowed / window]])


def rl_value(params: dict, pooled: np.ndarray) -> np.ndarray:
    return mlp(params, "v", pooled)[..., 0]


def init_layers(rng: np.random.Generator, net: str, sizes: list[int]) -> dict:
    """Glorot-uniform weights, zero biases (numpy; the trainer converts them)."""
    params = {}
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        limit = np.sqrt(6.0 / (a + b))
        params[f"{net}/{k}/w"] = rng.uniform(-limit, limit, size=(a, b)).astype(np.float32)
        params[f"{net}/{k}/b"] = np.zeros(b, dtype=np.float32)
    return params


def rl_init(rng: np.random.Generator, features: int) -> dict:
    params = init_layers(rng, "pi", [features, *RL_PI_HIDDEN, 1])
    params.update(init_layers(rng, "v", [2 * features + 2, *RL_V_HIDDEN, 1]))
    return params


def inspector_init(rng: np.random.Generator, features: int) -> dict:
    params = init_layers(rng, "pi", [features, *INSPECTOR_HIDDEN, 2])
    params.update(init_layers(rng, "v", [features, *INSPECTOR_HIDDEN, 1]))
    return params


def inspector_start(params: dict, reject: float) -> dict:
    """The inspector's policy made to reject with probability ``reject`` whatever the
    features (``--start-reject``): the last layer's weights shrunk tenfold, its biases
    set to the logits of (accept, reject). A random start rejects about half of the picks,
    which on heavy traces is so much worse than the base policy that PPO learns to accept
    always; a start near the base policy explores a few rejections at a time."""
    if not 0.0 < reject < 1.0:
        raise ValueError(f"the starting rejection probability must lie in (0, 1), got {reject}")
    out = dict(params)
    last = layer_count(params, "pi") - 1
    out[f"pi/{last}/w"] = (params[f"pi/{last}/w"] * 0.1).astype(np.float32)
    out[f"pi/{last}/b"] = np.array([0.0, np.log(reject / (1.0 - reject))], dtype=np.float32)
    return out
