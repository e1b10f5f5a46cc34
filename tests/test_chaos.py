"""The chaos schedule (launch/chaos.py) against a fake fleet: what is killed when, held and released."""

from __future__ import annotations

import pytest

from surreal.config import ChaosConfig, ConfigError, load_config
from surreal.launch.chaos import Chaos, read_chaos


class FakeFleet:
    def __init__(self, actors: int) -> None:
        self.up = {f"actor-{i}" for i in range(actors)}
        self.held: set[str] = set()
        self.kills: list[str] = []

    def running(self, role: str) -> list[str]:
        assert role == "actor"
        return sorted(self.up)

    def kill(self, name: str, hold: bool = False) -> bool:
        if name not in self.up:
            return False
        self.kills.append(name)
        if hold:
            self.up.discard(name)
            self.held.add(name)
        return True  # not held: back at once, as the supervisor restarts it

    def release(self, name: str) -> None:
        self.held.discard(name)
        self.up.add(name)


def test_one_actor_dies_every_s_seconds_drawn_from_the_seed(tmp_path):
    fleet = FakeFleet(4)
    chaos = Chaos(ChaosConfig(seed=3, kill_every_s=5.0), tmp_path)
    for second in range(0, 31):
        chaos.tick(fleet, float(second))
    assert len(fleet.kills) == 6 and fleet.up == {f"actor-{i}" for i in range(4)}, "restarted every time"
    again = FakeFleet(4)
    replay = Chaos(ChaosConfig(seed=3, kill_every_s=5.0), tmp_path / "x")
    (tmp_path / "x").mkdir()
    for second in range(0, 31):
        replay.tick(again, float(second))
    assert again.kills == fleet.kills, "the same seed kills the same actors"
    events = read_chaos(tmp_path)
    assert [e["action"] for e in events] == ["kill"] * 6 and [e["elapsed_s"] for e in events] == [5, 10, 15, 20, 25, 30]


def test_without_restart_actors_stay_dead_but_the_last_one_is_spared(tmp_path):
    fleet = FakeFleet(3)
    chaos = Chaos(ChaosConfig(kill_every_s=1.0, restart=False), tmp_path)
    for second in range(1, 10):
        chaos.tick(fleet, float(second))
    assert len(fleet.up) == 1 and len(fleet.held) == 2 and len(fleet.kills) == 2


def test_a_window_keeps_only_alive_actors_then_brings_the_rest_back(tmp_path):
    fleet = FakeFleet(4)
    chaos = Chaos(ChaosConfig(alive=1, window_start_s=10.0, window_s=20.0), tmp_path)
    chaos.tick(fleet, 9.9)
    assert len(fleet.up) == 4
    chaos.tick(fleet, 10.0)
    assert len(fleet.up) == 1 and len(fleet.held) == 3
    fleet.up.add("actor-9")  # an actor that joined during the window is held down too
    chaos.tick(fleet, 20.0)
    assert len(fleet.up) == 1 and len(fleet.held) == 4
    chaos.tick(fleet, 30.0)
    assert len(fleet.up) == 5 and not fleet.held
    assert [e["action"] for e in read_chaos(tmp_path)] == ["hold"] * 4 + ["release"] * 4


def test_chaos_is_validated_and_off_by_default():
    assert not load_config([]).chaos.active
    assert load_config(["chaos.kill_every_s=5"]).chaos.active
    assert load_config(["chaos.alive=1", "chaos.window_s=3"]).chaos.active
    with pytest.raises(ConfigError, match="chaos.alive"):
        load_config(["actors=2", "chaos.alive=3", "chaos.window_s=1"])
    with pytest.raises(ConfigError, match="chaos needs deterministic=false"):
        load_config(["deterministic=true", "actors=1", "chaos.kill_every_s=1"])
