"""ASA_X's learned expert: a scikit-learn regression tree fitted on the recorded (state,
action, loss) outcomes of its job class, which predicts the loss of each action and prefers
the largest lending predicted to be harmless. Uniform ("no opinion") until it has seen
enough outcomes. ``recall`` rebuilds it after a restart from its last outcomes only.
"""

from __future__ import annotations

import math

from ..model import InvalidInput
from .experts import HostState, action_fractions


class FittedTreeExpert:
    """An expert learned from outcomes: a regression tree predicts the loss of each action.

    Its distribution is p_j proportional to exp(beta * (a_j - penalty * predicted_loss_j)):
    lend as much as the tree predicts to be harmless. Uniform until ``min_samples``
    outcomes are recorded; refitted every ``refit_every`` new outcomes.
    """

    def __init__(self, m: int = 10, *, name: str = "fitted", min_samples: int = 20,
                 refit_every: int = 10, max_depth: int = 4, beta: float = 6.0,
                 penalty: float = 2.0, max_samples: int = 5000, seed: int = 0):
        self.name = name
        self.m = m
        self.actions = action_fractions(m)
        self.min_samples = min_samples
        self.refit_every = refit_every
        self.max_depth = max_depth
        self.beta = beta
        self.penalty = penalty
        self.max_samples = max_samples
        self.seed = seed
        self._X: list[list[float]] = []
        self._y: list[float] = []
        self._since_fit = 0
        self._model = None
        self._uniform = tuple(1.0 / m for _ in range(m))
        self._fits = 0                                  # refits so far (part of a key)
        self._dists: dict[tuple[int, ...], tuple[float, ...]] = {}   # leaves -> distribution

    @property
    def fitted(self) -> bool:
        return self._model is not None

    @property
    def samples(self) -> int:
        return len(self._y)

    def learn(self, state: HostState, action_fraction: float, loss: float) -> None:
        self._X.append(state.features() + [float(action_fraction)])
        self._y.append(float(loss))
        if len(self._y) > self.max_samples:  # keep the recent past: workloads drift
            del self._X[0], self._y[0]
        self._since_fit += 1
        # Refit at most every 10 % of the data seen, so refits cost O(1) amortised per outcome.
        due = max(self.refit_every, len(self._y) // 10)
        if len(self._y) >= self.min_samples and (self._model is None or self._since_fit >= due):
            self.refit()

    @property
    def recall_window(self) -> int:
        """The outcomes ``recall`` needs: the window of the last refit and those since."""
        return self.max_samples + max(self.refit_every, self.max_samples // 10)

    def _refits(self, seen: int) -> tuple[int, int]:
        """(outcome count at the last refit (0: none), refits) after ``seen`` outcomes,
        by ``learn``'s schedule. Once the window is full the interval is fixed, so the
        count is simulated only that far and the rest is arithmetic."""
        last = fits = since = 0
        full_every = max(self.refit_every, self.max_samples // 10)
        n = 0
        while n < seen:
            n += 1
            since += 1
            size = min(n, self.max_samples)
            if size >= self.min_samples and (not fits or since >= max(self.refit_every, size // 10)):
                last, fits, since = n, fits + 1, 0
            if fits and size == self.max_samples and since == 0:
                more = (seen - n) // full_every
                return last + more * full_every, fits + more
        return last, fits

    def recall(self, outcomes, seen: int) -> None:
        """Become exactly what ``seen`` calls of ``learn`` made of a fresh expert, given the
        last of those outcomes as (state, action fraction, loss): at least
        ``recall_window`` of them, or all. The tree is refitted once, on the rows of the
        last refit, with the same seed, so it is the same tree."""
        outcomes = list(outcomes)
        if seen < len(outcomes):
            raise InvalidInput(f"expert {self.name}: {len(outcomes)} outcomes cannot be the "
                               f"last of {seen}")
        last, fits = self._refits(seen)
        first = seen - len(outcomes)          # outcomes heard before the ones given
        start = max(0, last - self.max_samples) if last else max(0, seen - self.max_samples)
        if start < first:
            raise InvalidInput(f"expert {self.name}: recalling {seen} outcomes needs the last "
                               f"{seen - start}, got {len(outcomes)}")
        rows = [(state.features() + [float(a)], float(loss)) for state, a, loss in outcomes]
        self._model, self._dists = None, {}
        if last:
            window = rows[start - first:last - first]
            self._X, self._y = [r for r, _ in window], [y for _, y in window]
            self.refit()
            tail = rows[last - first:]
        else:
            self._X, self._y, tail = [], [], rows[start - first:]
        for x, y in tail:
            self._X.append(x)
            self._y.append(y)
        del self._X[:-self.max_samples], self._y[:-self.max_samples]
        self._since_fit = seen - last
        self._fits = fits

    def keyed_distribution(self, state: HostState) -> tuple[object, tuple[float, ...]]:
        """(key, distribution), as ``ThresholdTreeExpert.keyed_distribution``: the key is the
        fit and the leaves the ten actions reach; "no opinion" before the first fit."""
        if self._model is None:
            return None, self._uniform
        leaves = self._leaves_of(state.features())
        dist = self._dists.get(leaves)
        if dist is None:
            value = self._model[4]
            dist = self._dists[leaves] = self._distribution_of([value[n] for n in leaves])
        return (self._fits, leaves), dist

    @staticmethod
    def prepare() -> None:
        """Import scikit-learn's trees now (1-2 s, scipy and pandas with them). Imported
        late otherwise: at the first refit, inside a controller pass (``AsaxLearner.prepare``)."""
        import sklearn.tree  # noqa: F401

    def refit(self) -> None:
        from sklearn.tree import DecisionTreeRegressor  # imported late: slow to import

        model = DecisionTreeRegressor(max_depth=self.max_depth, min_samples_leaf=3,
                                      random_state=self.seed)
        model.fit(self._X, self._y)
        # Walk the fitted tree in plain Python: for 10 rows of 6 features sklearn's predict
        # costs ~100 us of call overhead, a walk of depth <= 4 costs ~10 us.
        tree = model.tree_
        self._model = (tree.children_left.tolist(), tree.children_right.tolist(),
                       tree.feature.tolist(), tree.threshold.tolist(),
                       [float(v[0][0]) for v in tree.value])
        self._since_fit = 0
        self._fits += 1
        self._dists = {}

    def _predict_row(self, row: list[float]) -> float:
        left, right, feature, threshold, value = self._model
        node = 0
        while left[node] != -1:  # -1 marks a leaf in sklearn's tree arrays
            node = left[node] if row[feature[node]] <= threshold[node] else right[node]
        return value[node]

    def _leaves_of(self, base: list[float]) -> tuple[int, ...]:
        """The leaf each action's row (the state's features, then the action) reaches. The
        walk is shared down to the first split on the action (the last feature)."""
        left, right, feature, threshold, _ = self._model
        a_feature = len(base)
        node = 0
        while left[node] != -1 and feature[node] != a_feature:
            node = left[node] if base[feature[node]] <= threshold[node] else right[node]
        if left[node] == -1:
            return (node,) * self.m
        top, row, out = node, base + [0.0], []
        for a in self.actions:
            row[a_feature] = a
            node = top
            while left[node] != -1:
                node = left[node] if row[feature[node]] <= threshold[node] else right[node]
            out.append(node)
        return tuple(out)

    def predicted_losses(self, state: HostState) -> list[float]:
        if self._model is None:
            return [math.nan] * self.m
        base = state.features()
        return [self._predict_row(base + [a]) for a in self.actions]

    def distribution(self, state: HostState) -> tuple[float, ...]:
        return self.keyed_distribution(state)[1]

    def _distribution_of(self, losses: list[float]) -> tuple[float, ...]:
        scores = [self.beta * (a - self.penalty * loss) for a, loss in zip(self.actions, losses)]
        top = max(scores)
        raw = [math.exp(s - top) for s in scores]
        total = sum(raw)
        return tuple(r / total for r in raw)
