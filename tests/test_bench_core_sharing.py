"""bench.core_sharing: the busy processes run exactly while the second measurement steps, and are reaped; the
ratios are read against the mean of the two measurements alone. Its stepping is bench.throughput's raw actor."""

from __future__ import annotations

import os

import pytest
from bench import core_sharing


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_SESSION_CHILDREN: set[int] = set()


@pytest.fixture(autouse=True)
def _session_children() -> None:
    _SESSION_CHILDREN.clear()
    _SESSION_CHILDREN.update(_children())


def test_busy_processes_spin_inside_the_block_and_are_reaped_after_it() -> None:
    with core_sharing.busy_processes(2):
        children = child_pids()
        assert len(children) == 2 and all(alive(pid) for pid in children)
    assert not any(alive(pid) for pid in children)  # killed and waited for: no zombie left either


def child_pids() -> list[int]:
    """This process's children, less those an earlier test left running for the whole session (multiprocessing's
    resource tracker, which the first spawned process starts)."""
    return [pid for pid in _children() if pid not in _SESSION_CHILDREN]


def _children() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == os.getpid()]


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None


def test_the_ratios_compare_with_the_actor_alone_before_and_after(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []  # (actors, busy children while it stepped)
    rates = iter([1000.0, 700.0, 4 * 800.0, 1100.0])

    def fake_raw_rate(env_id: str, actors: int, envs: int, seconds: float) -> float:
        calls.append((actors, len(child_pids())))
        return next(rates)

    monkeypatch.setattr(core_sharing, "raw_rate", fake_raw_rate)
    result = core_sharing.measure("HalfCheetah-v5", envs=4, busy=3, actors=4, seconds=1.0)
    assert calls == [(1, 0), (1, 3), (4, 0), (1, 0)]
    assert result["beside_busy_ratio"] == pytest.approx(700 / 1050, abs=1e-3)
    assert result["per_actor_of_n"] == 800.0 and result["per_actor_of_n_ratio"] == pytest.approx(800 / 1050, abs=1e-3)
