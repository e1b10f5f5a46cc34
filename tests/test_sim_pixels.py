"""The simulator's pixel chunks (sim/nodes.py `ScriptedChunks` on an image observation space): on the simulated wire
they weigh what the real actor's packed chunks weigh (each frame once, runtime/frame_chunks.py), and the ledger
follows each of them through a run with every invariant checked."""

from __future__ import annotations

import numpy as np
import pytest

from surreal.sim.nodes import EPISODE_STEPS, ScriptedChunks, message_bytes
from surreal.sim.scenarios import Scenario, run

ATARI = (4, 84, 84)
T, K = 64, 2


def test_a_pixel_ppo_chunk_weighs_on_the_simulated_wire_what_the_real_actors_chunk_weighs() -> None:
    """The real collector (PPO's CNN policy on Pong, frames packed) against the simulator's chunk of the same steps.
    Pong's episodes end at 800 emulator frames here (197-198 env steps after its no-op starts, against the
    simulator's EPISODE_STEPS = 200), so chunks 2, 4 and 5 lie inside an episode in both and must weigh exactly
    the same; across an episode's start the real frames may repeat byte for byte (Pong's first frames do), which
    `split` stores once, so there the simulator's distinct frames are an upper bound, by a few frames an end."""
    pytest.importorskip("ale_py", reason="the atari extra")
    from surreal.algos.ppo.policy import PPOPolicy, chunk_fields
    from surreal.config import algo_config, load_config
    from surreal.envs import make_vec_env
    from surreal.proto.wire import encode_chunk
    from surreal.runtime.rollout import RolloutCollector

    assert EPISODE_STEPS == 200
    cfg = algo_config(load_config(["preset=ppo-atari", "env=ALE/Pong-v5"], tasks=False))
    envs = make_vec_env("ALE/Pong-v5", K, seed=3, env_kwargs={"max_num_frames_per_episode": 800})
    try:
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        assert obs_space.shape == ATARI
        collector = RolloutCollector(envs, PPOPolicy(obs_space, act_space, cfg, 0), T, 0, frames=True)
        simulated = ScriptedChunks(chunk_fields(obs_space, act_space, cfg), T, K, pairs=False)
        real_bytes, sim_bytes = [], []
        for serial in range(7):
            real, sim = collector.collect(0), simulated.chunk(3, serial, 0)
            assert {k: np.shape(v) for k, v in sim.arrays.items() if k != "per_chunk"} == {
                k: np.shape(v) for k, v in real.arrays.items() if k != "per_chunk"
            }
            real_bytes.append(message_bytes(encode_chunk(real, "x")))
            sim_bytes.append(message_bytes(encode_chunk(sim, "x")))
    finally:
        envs.close()
    frame = 84 * 84
    per_step_fields = 4 + 1 + 1 + 8 + 4  # rewards, terminated, truncated, actions (int64), logprobs
    for serial in (2, 4, 5):  # inside an episode: the first stack's S frames and one a step, in both
        assert sim_bytes[serial] == real_bytes[serial]
        assert sim_bytes[serial] - 256 == K * (4 + T) * frame + 2 * T * K * 4 * 4 + T * K * per_step_fields
    for serial in range(7):
        assert 0 <= sim_bytes[serial] - real_bytes[serial] <= 3 * K * frame
    per_step = np.mean(sim_bytes) / (T * K)
    assert frame < per_step < 1.1 * frame  # each frame once: about one 84x84 frame an env step, not 8


def test_the_ledger_follows_every_pixel_chunk_through_a_run() -> None:
    scenario = Scenario(
        "ppo-pixels",
        "PPO on Atari stacks: chunks of frames and indices",
        actors=4,
        pixels=ATARI,
        env_dims=(int(np.prod(ATARI)), 6),
        hidden_sizes=None,
        total_env_steps=20_000,
    )
    report = run(scenario, seed=1)
    assert report.ok, report.violations
    assert report.stats["chunks_learned"] > 0
    assert report.stats["env_steps"] >= 20_000
