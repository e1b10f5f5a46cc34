"""Running mean and variance (float64, numpy) that can be merged and checkpointed. Torch-free."""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Chan et al.'s parallel update: merging a batch's (count, mean, var) is exact, so statistics
    gathered in pieces (chunks from many actors) equal those of the whole."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4  # as in OpenAI baselines: a tiny prior keeps the first normalize finite

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, np.float64)
        if batch.shape[0]:
            self.merge(batch.shape[0], batch.mean(axis=0), batch.var(axis=0))

    def merge(self, count: float, mean: np.ndarray, var: np.ndarray) -> None:
        delta = mean - self.mean
        total = self.count + count
        self.mean = self.mean + delta * count / total
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.var = m2 / total
        self.count = total

    def normalize(self, x: np.ndarray, clip: float) -> np.ndarray:
        return np.clip((x - self.mean) / np.sqrt(self.var + 1e-8), -clip, clip).astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": np.array(self.count)}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.mean = np.asarray(state["mean"], np.float64).copy()
        self.var = np.asarray(state["var"], np.float64).copy()
        self.count = float(np.asarray(state["count"]))
