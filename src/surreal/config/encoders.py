"""The convolutional encoders' names and widths, torch-free: what PPO's and SAC's `algo.encoder` may name
(algos/encoders.py builds them), and the width of each one's dense layer, by which the policy artifact's reader bounds
a network before it builds one."""

from __future__ import annotations

# `algo.encoder`: the convolutional encoders of algos/encoders.py (which this torch-free file does not import), and
# the features each gives the heads.
ENCODERS = {"nature": 512, "impala": 256}


def encoder_widths(encoder: str, shape: tuple[int, ...]) -> list[int]:
    """The widths of `encoder`'s dense layer for images of `shape` (C, H, W): the values its convolutions make of one
    image, and its features (algos/encoders.py builds the same; the policy artifact's reader bounds a network by them
    before it builds one). PPO's and SAC's `algo.encoder`."""
    _, height, width = shape
    if encoder == "nature":  # 8x8 stride 4, 4x4 stride 2, 3x3 stride 1; 64 channels
        side = lambda n: max(0, ((n - 8) // 4 + 1 - 4) // 2 + 1 - 2)
        return [64 * side(height) * side(width), ENCODERS["nature"]]
    eighth = lambda n: (((n + 1) // 2 + 1) // 2 + 1) // 2  # three stride-2 max pools, rounded up; 32 channels
    return [32 * eighth(height) * eighth(width), ENCODERS["impala"]]
