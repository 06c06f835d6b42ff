"""A max segment tree: the first index >= i whose value is >= x in O(log n) (pure).

The host index keeps one per spare room (and per kind of value: estimated end, idle cores),
so that finding a guest's candidate hosts skips hosts already asked, hosts that end too
early under an EASY reservation and hosts without idle CPU enough, without walking them one
by one for every guest.
"""

from __future__ import annotations

import math

_NEG = -math.inf


class MaxTree:
    """Values at fixed positions 0..n-1; ``-inf`` marks an empty position."""

    __slots__ = ("size", "tree")

    def __init__(self, values: list[float]):
        size = 1
        while size < max(1, len(values)):
            size *= 2
        tree = [_NEG] * (2 * size)
        tree[size:size + len(values)] = values
        # Level by level (each parent the max of its two children), in C rather than a loop.
        lo = size
        while lo > 1:
            tree[lo // 2:lo] = map(max, tree[lo:2 * lo:2], tree[lo + 1:2 * lo:2])
            lo //= 2
        self.size, self.tree = size, tree

    @classmethod
    def empty(cls, n: int) -> "MaxTree":
        """n positions, all empty."""
        t = cls.__new__(cls)
        size = 1
        while size < max(1, n):
            size *= 2
        t.size, t.tree = size, [_NEG] * (2 * size)
        return t

    def value(self, i: int) -> float:
        return self.tree[self.size + i]

    def set(self, i: int, x: float) -> None:
        """Position i holds x; the maxima above it follow (they stop at the first that does
        not change)."""
        tree = self.tree
        k = i + self.size
        tree[k] = x
        k >>= 1
        while k:
            a, b = tree[2 * k], tree[2 * k + 1]
            v = b if b > a else a   # max(a, b), NaN and all
            if tree[k] == v:
                return   # this subtree's maximum did not change: nor do those above it
            tree[k] = v
            k >>= 1

    def remove(self, i: int) -> None:
        """Position i becomes empty (-inf)."""
        self.set(i, _NEG)

    def first_at_least(self, i: int, x: float) -> int:
        """Smallest index >= i with value >= x, or -1."""
        tree, size = self.tree, self.size
        if i >= size or tree[1] < x:
            return -1
        k = i + size
        if tree[k] >= x:
            return i
        # Climb until a right sibling holds a value >= x, then descend to its leftmost such leaf.
        while True:
            if k & 1 == 0 and tree[k + 1] >= x:
                k += 1
                break
            k //= 2
            if k <= 1:
                return -1
        while k < size:
            k = 2 * k if tree[2 * k] >= x else 2 * k + 1
        return k - size


__all__ = ["MaxTree"]
