"""A sum tree (and min tree) over slot priorities, vectorized over batches.

Proportional prioritized replay needs three operations per learner step: set the priorities of a batch
of slots, draw a batch of slots with probability p_i / sum(p), and know min(p) for the importance-weight
normaliser. Both trees are flat arrays (node i has children 2i and 2i+1, leaves at [size, 2*size)); a
batch update rewrites the touched path level by level and a batch lookup descends all samples at once,
so the cost is O(batch x log capacity) numpy work, not Python loops per sample.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())  # leaves: next power of two
        self.depth = self.size.bit_length() - 1
        self.sums = np.zeros(2 * self.size, dtype=np.float64)
        self.mins = np.full(2 * self.size, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """Smallest priority among slots ever set (inf when none)."""
        return float(self.mins[1])

    def get(self, slots: np.ndarray) -> np.ndarray:
        return self.sums[self.size + np.asarray(slots, dtype=np.int64)]

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64)
        if slots.size == 0:
            return
        if slots.min() < 0 or slots.max() >= self.capacity:
            raise IndexError("slot out of range")
        nodes = self.size + slots
        # With duplicate slots in one batch the last write wins, as a sequential loop would do.
        self.sums[nodes] = priorities
        self.mins[nodes] = priorities
        nodes = np.unique(nodes // 2)
        while nodes.size and nodes[0] >= 1:
            self.sums[nodes] = self.sums[2 * nodes] + self.sums[2 * nodes + 1]
            self.mins[nodes] = np.minimum(self.mins[2 * nodes], self.mins[2 * nodes + 1])
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find_prefix_sum(self, values: np.ndarray) -> np.ndarray:
        """For each value v in [0, total), the slot i with cumsum(p)[i-1] <= v < cumsum(p)[i]."""
        # Keep draws strictly below the total so round-off cannot walk into the empty leaves on the right.
        values = np.minimum(np.asarray(values, dtype=np.float64), np.nextafter(self.total, 0.0))
        nodes = np.ones(values.shape, dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_sum = self.sums[left]
            go_right = values >= left_sum
            values -= np.where(go_right, left_sum, 0.0)
            nodes = left + go_right
        return nodes - self.size
