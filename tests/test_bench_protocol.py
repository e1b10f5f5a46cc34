"""bench.protocol's ceiling for a channel over CURVE: the cipher libzmq runs, and the bound it puts on a ratio."""

from __future__ import annotations

import pytest
from bench.protocol import cipher_numbers, curve_bounds, libsodium


def test_the_bound_is_the_share_of_cpu_time_left_to_plaintext() -> None:
    # 2 cores busy with plaintext at P=2 GB/s: 1 ns a byte; CURVE adds 2 / C = 1 ns at C=2: half is kept.
    bounds = curve_bounds({"x_gbytes_per_s": 2.0, "y_gbytes_per_s": 0.5, "transitions_per_s": 9.0}, 2.0, cores=2)
    assert bounds == {"x_gbytes_per_s": pytest.approx(0.5), "y_gbytes_per_s": pytest.approx(0.8)}
    # More cores than the channel's four threads do not lift it further.
    assert curve_bounds({"x_gbytes_per_s": 2.0}, 2.0, cores=64) == curve_bounds({"x_gbytes_per_s": 2.0}, 2.0, cores=4)
    assert curve_bounds({"x_gbytes_per_s": 2.0}, 2.0, cores=4)["x_gbytes_per_s"] == pytest.approx(2 / 3)


def test_the_cipher_is_found_and_timed() -> None:
    """pyzmq's wheel carries the libsodium its libzmq encrypts with; the cipher is slower than a memory copy."""
    assert libsodium() is not None
    numbers = cipher_numbers(quick=True)
    assert 0 < numbers["cipher_gbytes_per_s"] < numbers["memmove_gbytes_per_s"]
