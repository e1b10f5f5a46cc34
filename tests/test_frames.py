"""Frame storage (src/surreal/frames.py): a chunk of stacked observations carried as each frame once rebuilds to
exactly the env's stacks, across episode ends and chunk boundaries, at about one frame per env step; a frame ring
serves (obs, next_obs) of stored transitions until their frames are overwritten."""

from __future__ import annotations

import numpy as np
import pytest
from bench.frames import RandomPolicy
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from surreal.frames import FrameChunk, FrameRing, split

CHUNK_STEPS, ENVS, CHUNKS = 128, 2, 3


@pytest.fixture(scope="module")
def pong_chunks() -> list[dict[str, np.ndarray]]:
    """Three consecutive chunks of 128 steps x 2 envs of Pong, as the actor's collector records them; a frame cap of
    400 frames ends an episode every 100 steps, so chunks start mid-episode and hold episode ends."""
    pytest.importorskip("ale_py", reason="the atari extra")
    from surreal.envs import make_vec_env
    from surreal.runtime.rollout import RolloutCollector

    envs = make_vec_env("ALE/Pong-v5", ENVS, seed=3, env_kwargs={"max_num_frames_per_episode": 400})
    collector = RolloutCollector(envs, RandomPolicy(6, ENVS, 0), CHUNK_STEPS, 0)  # type: ignore[arg-type]
    chunks = []
    for _ in range(CHUNKS):
        arrays = collector.collect(0).arrays
        done = arrays["terminated"] | arrays["truncated"]
        chunks.append(
            {"obs": arrays["obs"].astype(np.uint8), "next_obs": arrays["next_obs"].astype(np.uint8), "done": done}
        )
    envs.close()
    return chunks


def test_the_rebuilt_stacks_are_the_envs_across_episode_ends_and_chunk_boundaries(pong_chunks):
    for number, arrays in enumerate(pong_chunks):
        obs, next_obs, done = arrays["obs"], arrays["next_obs"], arrays["done"]
        chunk = split(obs, next_obs)
        chunk.check((84, 84), 4)
        np.testing.assert_array_equal(chunk.obs(), obs)
        np.testing.assert_array_equal(chunk.next_obs(), next_obs)
        ends = int(done[:-1].sum())
        assert ends >= 2, f"chunk {number}: episode ends inside the chunk"
        # One stack carried whole per env, one frame a step, one reset frame per episode end (stored once though
        # the reset's stack repeats it four times), nothing else.
        assert len(chunk.frames) <= ENVS * (4 + CHUNK_STEPS) + ends, (number, len(chunk.frames))
        for t, k in zip(*np.nonzero(done[:-1]), strict=True):
            assert len(set(chunk.obs_index[t + 1, k].tolist())) == 1, "a reset's stack is one frame"
        if number > 0:  # the chunk starts mid-episode: its first stacks hold the 3 frames before it, carried in it
            assert not pong_chunks[number - 1]["done"][-1].any()
            np.testing.assert_array_equal(obs[0], pong_chunks[number - 1]["next_obs"][-1])


def test_the_layout_carries_at_most_1_1_frames_per_env_step_against_8_naively(pong_chunks):
    frame = 84 * 84
    for arrays in pong_chunks:
        chunk = split(arrays["obs"], arrays["next_obs"])
        steps = CHUNK_STEPS * ENVS
        assert chunk.nbytes / steps <= 1.1 * frame, chunk.nbytes / steps / frame
        assert (arrays["obs"].nbytes + arrays["next_obs"].nbytes) / steps == 8 * frame  # two arrays of whole stacks


def test_a_frame_ring_serves_stored_transitions_until_their_frames_are_overwritten(pong_chunks):
    chunks = [split(a["obs"], a["next_obs"]) for a in pong_chunks]
    # Room for the last chunk and half the one before it: adding the last overwrites the first and half the second.
    ring = FrameRing(capacity=len(chunks[1].frames) // 2 + len(chunks[2].frames), frame_shape=(84, 84))
    rng = np.random.default_rng(1)
    stored = []
    for chunk, arrays in zip(chunks[:2], pong_chunks, strict=False):
        obs_at, next_at = ring.add(chunk)
        stored.append((obs_at, next_at))
        t, k = rng.integers(0, CHUNK_STEPS, 64), rng.integers(0, ENVS, 64)  # a sampled batch of transitions
        np.testing.assert_array_equal(ring.gather(obs_at[t, k]), arrays["obs"][t, k])
        np.testing.assert_array_equal(ring.gather(next_at[t, k]), arrays["next_obs"][t, k])
    obs_at, next_at = ring.add(chunks[2])  # wraps around, over the first chunk's frames
    np.testing.assert_array_equal(ring.gather(obs_at), pong_chunks[2]["obs"])
    np.testing.assert_array_equal(ring.gather(next_at), pong_chunks[2]["next_obs"])
    assert not ring.valid(stored[0][0]).any(), "the first chunk's frames are overwritten"
    with pytest.raises(ValueError, match="overwritten or never stored"):
        ring.gather(stored[0][0][0, 0])
    still = ring.valid(stored[1][1])
    assert still.any() and not still.all(), "the second chunk's oldest frames are gone, its newest are not"
    np.testing.assert_array_equal(ring.gather(stored[1][1][still]), pong_chunks[1]["next_obs"][still])
    with pytest.raises(ValueError, match="does not fit"):
        FrameRing(10, (84, 84)).add(chunks[0])


stacks = st.tuples(st.integers(1, 6), st.integers(1, 3), st.integers(1, 4)).flatmap(
    lambda tks: st.tuples(
        *[hnp.arrays(np.uint8, (*tks, 2, 3), elements=st.integers(0, 1)) for _ in range(2)],
    )
)


@settings(max_examples=200, deadline=None)
@given(stacks)
def test_any_chunk_rebuilds_exactly_whatever_its_frames(pair):
    """Frames drawn from {0, 1} collide often: equal frames where no stack structure holds must not fool `split`."""
    obs, next_obs = pair
    chunk = split(obs, next_obs)
    chunk.check((2, 3), obs.shape[2])
    np.testing.assert_array_equal(chunk.obs(), obs)
    np.testing.assert_array_equal(chunk.next_obs(), next_obs)
    assert len(chunk.frames) <= 2 * obs.shape[0] * obs.shape[1] * obs.shape[2]


def test_a_malformed_chunk_is_refused_before_it_is_gathered():
    obs = np.arange(2 * 1 * 4 * 6, dtype=np.uint8).reshape(2, 1, 4, 2, 3)
    good = split(obs, obs)
    good.check((2, 3), 4)
    bad = {
        "points outside": FrameChunk(good.frames, good.obs_index + len(good.frames), good.next_index),
        "not int32": FrameChunk(good.frames, good.obs_index.astype(np.int64), good.next_index),
        "frames are": FrameChunk(good.frames.astype(np.float32), good.obs_index, good.next_index),
        "not uint8 (2, 3)": FrameChunk(good.frames.reshape(-1, 3, 2), good.obs_index, good.next_index),
        "[T, K, 4]": FrameChunk(good.frames, good.obs_index[..., :3], good.next_index),
        "differ": FrameChunk(good.frames, good.obs_index, good.next_index[:1]),
    }
    for says, chunk in bad.items():
        with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            chunk.check((2, 3), 4)
    with pytest.raises(ValueError, match="not \\[T, K, S"):
        split(obs, obs[:1])
