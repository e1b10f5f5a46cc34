"""A sum tree (and min tree) over slot priorities, vectorized over batches.

Proportional prioritized replay needs three operations per learner step: set the priorities of a batch
of slots, draw a batch of slots with probability p_i / sum(p), and know min(p) for the importance-weight
normaliser. Both trees are flat float64 arrays (node i has children 2i and 2i+1, leaves at
[size, 2*size) with size the next power of two); a batch update rewrites the touched paths level by
level and a batch lookup descends all samples at once, so the cost is O(batch x log capacity) numpy
work with a Python loop over the ~20 levels only, never over samples.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Priorities of `capacity` slots (0 until set); `total`, `min` and prefix-sum lookup in O(log n)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 (got {capacity})")
        self.capacity = capacity
        self._leaves = 1 << (capacity - 1).bit_length()
        self._depth = self._leaves.bit_length() - 1
        self._sums = np.zeros(2 * self._leaves, dtype=np.float64)
        # Unset leaves hold +inf so they never become the minimum: the importance-weight normaliser must be
        # the smallest priority among stored transitions, not the 0 of an empty slot.
        self._mins = np.full(2 * self._leaves, np.inf, dtype=np.float64)
        # Views with the children of node i as row i: one row gather reads both, faster than two gathers.
        self._sum_pairs = self._sums.reshape(-1, 2)
        self._min_pairs = self._mins.reshape(-1, 2)

    @property
    def total(self) -> float:
        return float(self._sums[1])

    @property
    def min(self) -> float:
        """Smallest priority among the slots ever set (+inf while none is)."""
        return float(self._mins[1])

    def get(self, slots: np.ndarray) -> np.ndarray:
        return self._sums[self._leaves + np.asarray(slots, dtype=np.int64)]

    def head(self, count: int) -> np.ndarray:
        """A copy of the priorities of slots [0, count): one memcpy, for a snapshot."""
        return self._sums[self._leaves : self._leaves + count].copy()

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of a batch of slots; with a slot repeated, its last priority wins (as a loop
        of single updates would do), because numpy leaves repeated fancy-index writes unordered."""
        slots = np.asarray(slots, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64)
        if slots.ndim != 1 or slots.shape != priorities.shape:
            raise ValueError(f"slots {slots.shape} and priorities {priorities.shape} must be equally long 1-d")
        if slots.size == 0:
            return
        if slots.min() < 0 or slots.max() >= self.capacity:
            raise IndexError(f"slot out of range [0, {self.capacity})")
        if not np.all(np.isfinite(priorities)) or priorities.min() < 0:
            raise ValueError("priorities must be finite and >= 0")
        # np.unique keeps the first occurrence; on the reversed batch that is the last write.
        slots, last = np.unique(slots[::-1], return_index=True)
        nodes = self._leaves + slots
        self._sums[nodes] = priorities[::-1][last]
        self._mins[nodes] = self._sums[nodes]
        if slots[-1] - slots[0] + 1 == slots.size:
            self._refresh_run(int(nodes[0]), int(nodes[-1]) + 1)
            return
        for _ in range(self._depth):
            nodes = nodes >> 1  # sorted, so parents shared by siblings are adjacent duplicates
            nodes = nodes[np.concatenate(([True], nodes[1:] != nodes[:-1]))]
            children = np.take(self._sum_pairs, nodes, axis=0)
            self._sums[nodes] = children[:, 0] + children[:, 1]
            children = np.take(self._min_pairs, nodes, axis=0)
            self._mins[nodes] = np.minimum(children[:, 0], children[:, 1])

    def _refresh_run(self, start: int, stop: int) -> None:
        """Recompute the ancestors of the leaves [start, stop) with slices: one run of slots is what every
        add writes, and slice arithmetic there is several times cheaper than gathers and dedupes."""
        for _ in range(self._depth):
            start, stop = start >> 1, ((stop - 1) >> 1) + 1
            np.add(self._sum_pairs[start:stop, 0], self._sum_pairs[start:stop, 1], out=self._sums[start:stop])
            np.minimum(self._min_pairs[start:stop, 0], self._min_pairs[start:stop, 1], out=self._mins[start:stop])

    def find_prefix_sum(self, values: np.ndarray) -> np.ndarray:
        """For each v in [0, total): the slot i with cumsum(p)[i-1] <= v < cumsum(p)[i].

        Round-off can leave a value at or above the sum of the subtree it descends into (an inner sum is
        the rounded sum of its children). Going right only into a subtree with a positive sum keeps every
        step inside positive mass, so the result is always a slot with priority > 0, never an empty slot.
        """
        total = self.total
        if not total > 0:
            raise ValueError("no slot has a positive priority")
        values = np.clip(np.asarray(values, dtype=np.float64), 0.0, np.nextafter(total, 0.0))
        nodes = np.ones(values.shape, dtype=np.int64)
        for _ in range(self._depth):
            children = np.take(self._sum_pairs, nodes, axis=0)
            go_right = (values >= children[:, 0]) & (children[:, 1] > 0)
            values -= children[:, 0] * go_right
            nodes = 2 * nodes + go_right
        return nodes - self._leaves
