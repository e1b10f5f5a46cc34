"""SAC from pixels (DrQ) through the stack: a rendered MuJoCo task's stacks stored as each frame once in the replay and
rebuilt exactly across episode ends and wrap-arounds, overwritten frames never served, snapshots, the encoder trained
by the critics' loss only, a serial run, its CNN artifact in a fresh process and its exports.

The env is InvertedPendulum-v5 seen through its camera (`env.kwargs.pixels=true`, envs_pixels.py): under uniform random
actions its episodes end within a few steps, so every chunk holds several episode ends. The serial run is a toy (300
env steps, 50 updates of 32): it checks that everything around a CNN SAC policy works, not that it learns
(bench/results/pixel-sac.2core.json measures that).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from bench.pixel_sac import CAMERA

from surreal.algos.offpolicy import NStepCollector, chunk_fields
from surreal.algos.sac.config import SACConfig
from surreal.algos.sac.learner import SACLearner
from surreal.algos.sac.nets import EncodedActor, make_actor, random_shift
from surreal.algos.sac.policy import SACPolicy
from surreal.cli import main
from surreal.config import algo_config, load_config
from surreal.envs import make_vec_env
from surreal.envs_pixels import PixelEnv
from surreal.policy.artifact import FILE_NAME, POLICY_DIR, read_policy_file
from surreal.policy.load import load_policy
from surreal.proto.channels import frames_of
from surreal.proto.codec import Limits, decode
from surreal.proto.wire import IDS, PER_CHUNK, Chunk, Field, decode_chunk, encode_chunk, fields_of, layout_of
from surreal.replay.frame_storage import FrameStorage, stored_nbytes
from surreal.replay.shard import ReplayShard
from surreal.runtime.checkpoint import CheckpointStore
from surreal.runtime.frame_chunks import FRAMES_FIELD, frame_fields, pack, served_fields
from surreal.runtime.rollout import RolloutCollector

PENDULUM = "InvertedPendulum-v5"
PIXELS = {"pixels": True}
STEPS, ENVS = 16, 2


def spaces_of(**kwargs: Any) -> tuple[Any, Any]:
    envs = make_vec_env(PENDULUM, 1, 0, {**PIXELS, **kwargs})
    try:
        return envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()


def collector(n_step: int, packed: bool, seed: int = 5) -> NStepCollector:
    """An actor's collector on two rendered pendulums acting uniformly at random (SAC's warm-up); `packed`: chunks as
    each frame once (what actors send), else the naive stacks."""
    cfg = SACConfig(n_step=n_step, seed=seed)
    envs = make_vec_env(PENDULUM, ENVS, seed, PIXELS)
    policy = SACPolicy(envs.single_observation_space, envs.single_action_space, cfg, 0)
    inner = RolloutCollector(envs, policy, STEPS, 0)
    return NStepCollector(inner, n_step, cfg.gamma, cfg.frame_planes if packed else None)


def wired(chunk: Chunk) -> Chunk:
    return decode_chunk(decode(frames_of(encode_chunk(chunk, "")), Limits()))


# -- the replay stores each frame once ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_step", [1, 3])
def test_the_replay_rebuilds_the_envs_stacks_across_episode_ends_and_wrap_arounds(n_step):
    """Chunks as the actor sends them, through the wire into a shard's frame replay of 64 transitions: after each
    chunk every stored transition's (obs, next_obs) is what the env returned (the same rollout collected naively),
    found by its insertion id, while episodes end within chunks and the replay wraps several times."""
    obs_space, act_space = spaces_of()
    fields = chunk_fields(obs_space, act_space, SACConfig(n_step=n_step))
    assert fields[FRAMES_FIELD].shape == (3, 84, 84) and fields["obs_index"].shape == (3,)  # RGB frames, 3 a stack
    shard = ReplayShard("uniform", 64, seed=1, layout=fields_of(layout_of(fields)))
    storage = shard.storage
    assert isinstance(storage, FrameStorage)
    packed, naive = collector(n_step, True), collector(n_step, False)
    expected: dict[str, list[np.ndarray]] = {"obs": [], "next_obs": []}
    ends = 0
    for _ in range(6):
        chunk, plain = packed.collect(0), naive.collect(0)
        assert "obs" not in chunk.arrays and chunk.arrays[PER_CHUNK]["frames"].dtype == np.uint8
        for key in expected:
            expected[key].append(plain.arrays[key].reshape(-1, *obs_space.shape))
        ends += int((plain.arrays["discounts"] == 0).sum())
        shard.add(decode(frames_of(encode_chunk(chunk, "")), Limits()))
        slots = np.arange(storage.size)
        got = storage.gather(storage.stored_slots(slots))
        ids = storage.ids[storage.stored_slots(slots)].astype(np.int64) - 1
        for key in expected:
            every = np.concatenate(expected[key])
            assert np.array_equal(got[key], every[ids]), key
    assert ends >= 3, "episodes end inside the chunks"
    assert storage.added > 2 * storage.capacity, "the replay wrapped"
    reply = shard.sample(32)
    served_ids = reply.transitions[IDS].astype(np.int64) - 1  # type: ignore[union-attr]
    assert np.array_equal(reply.transitions["obs"], np.concatenate(expected["obs"])[served_ids])  # type: ignore[union-attr]


def synthetic_chunk(rng: np.random.Generator, steps: int, resets: bool, first: int) -> tuple[Chunk, int]:
    """A chunk of `steps` x 1 env of 2-frame stacks of 1 x 4 x 4 frames whose pixels name the frame (`first` on),
    every step a reset (its stack stored whole: 3 frames a step) when `resets`, else a running episode."""
    count = first
    obs, next_obs = [], []
    for _ in range(steps):
        if resets or not obs:
            o = np.stack([np.full((4, 4), count % 251), np.full((4, 4), (count + 1) % 251)]).astype(np.uint8)
            count += 2
        else:
            o = next_obs[-1]
        n = np.stack([o[1], np.full((4, 4), count % 251, np.uint8)])
        count += 1
        obs.append(o)
        next_obs.append(n)
    arrays = {
        "obs": np.stack(obs)[:, None],
        "next_obs": np.stack(next_obs)[:, None],
        "actions": rng.normal(size=(steps, 1, 1)).astype(np.float32),
        "rewards": np.zeros((steps, 1), np.float32),
        "discounts": np.ones((steps, 1), np.float32),
    }
    return Chunk(pack(arrays), 0, 0, [], [], steps=steps), count


def test_transitions_whose_frames_were_overwritten_are_evicted_and_never_served():
    """Chunks of back-to-back resets bring three frames a transition, more than the ring's 1.1: the oldest
    transitions lose their frames before their rows, so they leave the stored range with them, and every sample
    (thousands) is of stacks whose frames are still those the chunk carried."""
    rng = np.random.default_rng(0)
    fields = {
        **frame_fields((2, 4, 4)),
        "actions": Field(np.dtype(np.float32), (1,)),
        "rewards": Field(np.dtype(np.float32)),
        "discounts": Field(np.dtype(np.float32)),
    }
    storage = FrameStorage(40, layout=fields)
    count, served = 0, 0
    for i in range(12):
        chunk, count = synthetic_chunk(rng, 10, resets=i % 3 != 2, first=count)
        storage.add(wired(chunk), 10)
        assert storage.size <= storage.capacity
        slots = storage.stored_slots(rng.integers(0, storage.size, 256))
        rows = {k: np.take(a, slots, axis=0) for k, a in storage.data.items()}
        assert storage.ring.valid(rows["obs_index"]).all() and storage.ring.valid(rows["next_index"]).all()
        got = storage.gather(slots)
        # The pixels of a stack's frames name consecutive frames (mod 251): the last is one past the first.
        assert np.array_equal((got["obs"][:, 0, 0, 0] + 1) % 251, got["obs"][:, 1, 0, 0] % 251)
        assert np.array_equal(got["next_obs"][:, 0], got["obs"][:, 1])
        served += len(slots)
    assert storage.size < storage.capacity, "frames ran out before rows: transitions were evicted with their frames"
    assert storage.stats()["dropped"] == storage.added - storage.size
    with pytest.raises(ValueError, match="overwritten"):
        storage.ring.gather(np.array([[0, 1]]))  # the first chunk's frames are long gone


def test_a_frame_replays_snapshot_restores_what_it_served_and_the_bytes_are_priced_as_frames():
    """capture -> restored gives a replay that rebuilds the same stacks for the same ids and keeps taking chunks; the
    bytes a replay of frames needs are the frames once (the naive layout holds each stack twice a transition)."""
    obs_space, act_space = spaces_of()
    fields = chunk_fields(obs_space, act_space, SACConfig())
    storage = FrameStorage(48, layout=fields)
    packed = collector(1, True)
    for _ in range(4):
        chunk = packed.collect(0)
        storage.add(wired(chunk), chunk.size)
    restored = storage.restored(storage.capture(0).joined())
    assert (restored.size, restored.added, restored.ring.end) == (storage.size, storage.added, storage.ring.end)
    before = storage.gather(storage.stored_slots(np.arange(storage.size)))
    after = restored.gather(restored.stored_slots(np.arange(restored.size)))
    assert all(np.array_equal(before[k], after[k]) for k in before)
    chunk = packed.collect(0)
    storage.add(chunk, chunk.size)
    restored.add(chunk, chunk.size)
    assert restored.size == storage.size
    mine, theirs = storage.stored_slots(np.arange(storage.size)), restored.stored_slots(np.arange(storage.size))
    assert np.array_equal(storage.gather(mine)["next_obs"], restored.gather(theirs)["next_obs"])
    naive = 2 * int(np.prod(obs_space.shape))
    assert stored_nbytes(fields, 1_000_000) / 1_000_000 < 0.6 * naive  # an RGB 3-stack: about 1.1 of 3 frames
    assert served_fields(fields)["obs"].shape == obs_space.shape


# -- what the camera shows ------------------------------------------------------------------------------------------


def pole_in_view(env: PixelEnv, cart: float, angle: float) -> tuple[int, int, float]:
    """(the pole's height in pixels, its topmost row, the mean column of that row) in the render of the task set to
    the cart at `cart` and the pole at `angle` rad; the pole is the teal pixels (green and blue well above red)."""
    env.reset(seed=0)
    env.task.set_state(np.array([cart, angle]), np.zeros(2))
    red, green, blue = env.frame().astype(int)
    pole = (green > red + 30) & (blue > red + 30)
    rows = np.nonzero(pole.any(1))[0]
    assert len(rows), "the pole is out of view"
    return int(rows[-1] - rows[0] + 1), int(rows[0]), float(np.nonzero(pole[rows[0]])[0].mean())


def test_the_tasks_camera_settings_reach_the_renderer_and_the_benchmarks_camera_shows_the_pole_larger():
    """`env.kwargs.default_camera_config` goes to the task's renderer (the benchmark's 1.5 m camera shows the 0.6 m
    pole about 1.4x the default's 2.04 m one, whole, and leaning 0.2 rad, where the episode ends, moves its tip by
    more than 5 pixels either way), and the cart stays in view 0.6 m off the middle."""
    default = PixelEnv(PENDULUM, pixels=True)
    closer = PixelEnv(PENDULUM, pixels=True, default_camera_config=CAMERA)
    try:
        (tall, _, upright), (_, _, leaning) = pole_in_view(default, 0.0, 0.0), pole_in_view(default, 0.0, 0.2)
        (taller, top, near), (_, _, near_leaning) = pole_in_view(closer, 0.0, 0.0), pole_in_view(closer, 0.0, 0.2)
        assert taller >= 1.3 * tall and top > 0, (tall, taller, top)
        assert abs(leaning - upright) > 5 and abs(near_leaning - near) > 5
        assert pole_in_view(closer, 0.6, 0.0)[0] >= taller - 2 and pole_in_view(closer, -0.6, 0.0)[0] >= taller - 2
    finally:
        default.close()
        closer.close()


# -- the learner ---------------------------------------------------------------------------------------------------


def image_batch(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.integers(0, 256, (batch, 9, 84, 84), dtype=np.uint8),
        "next_obs": rng.integers(0, 256, (batch, 9, 84, 84), dtype=np.uint8),
        "actions": rng.uniform(-3, 3, (batch, 1)).astype(np.float32),
        "rewards": rng.normal(size=batch).astype(np.float32),
        "discounts": np.full(batch, 0.99, np.float32),
    }


def test_the_encoder_is_trained_by_the_critics_loss_only():
    """Two learners in the same state take the same minibatch, one with the actor's step and one without: the
    encoder comes out the same (the actor's loss gives it no gradient), the actor's head does not; the critics' step
    moves the encoder, and the target encoder follows it by tau."""
    torch.manual_seed(0)
    obs_space, act_space = spaces_of()
    learner = SACLearner(obs_space, act_space, SACConfig(batch_size=8), torch.device("cpu"))
    twin = SACLearner(obs_space, act_space, SACConfig(batch_size=8), torch.device("cpu"))
    b = learner.sample_tensors(image_batch(8), 1)
    b = {k: v[0] for k, v in b.items()}
    encoder_before = [p.detach().clone() for p in learner.encoder.parameters()]  # type: ignore[union-attr]
    learner.train_step(dict(b), update_actor=True)
    twin.train_step(dict(b), update_actor=False)
    for mine, other, before in zip(
        learner.encoder.parameters(),  # type: ignore[union-attr]
        twin.encoder.parameters(),  # type: ignore[union-attr]
        encoder_before,
        strict=True,
    ):
        assert torch.equal(mine, other)
        assert not torch.equal(mine, before)
    heads = zip(learner.head.parameters(), twin.head.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in heads)
    target_before = [p.clone() for p in learner.encoder_target.parameters()]  # type: ignore[union-attr]
    learner.after_step(torch.zeros(len(learner.step_stats)))
    assert any(not torch.equal(a, b) for a, b in zip(learner.encoder_target.parameters(), target_before, strict=True))  # type: ignore[union-attr]


def test_the_encoders_output_is_drqs_bounded_layer_normed_features_and_the_artifacts_bound_knows_its_width():
    """DrQ's output layer (`algo.encoder_features`, 50): a dense layer from the convolutions, layer norm, tanh, so every
    feature is in (-1, 1) and none is zero for every image (the Nature CNN's ReLU layer lost 391 of its 512 units to
    the critics' loss in an InvertedPendulum run); the widths the artifact's reader bounds a network by are the built
    ones, and `algo.encoder_features=0` keeps the encoder's own 512 ReLUs."""
    obs_space, act_space = spaces_of()
    images = torch.as_tensor(image_batch(16)["obs"])
    for features in (50, 0):
        cfg = SACConfig(encoder_features=features)
        actor = make_actor(obs_space, act_space, cfg)
        assert isinstance(actor, EncodedActor)
        dense = [m for m in actor.encoder.network if isinstance(m, torch.nn.Linear)]
        assert [dense[-1].in_features, dense[-1].out_features] == cfg.encoder_widths(tuple(obs_space.shape))
        with torch.no_grad():
            out = actor.encoder(images)
        if features:
            assert out.shape == (16, 50) and out.abs().max() < 1 and bool((out != 0).any(0).all())
            norm, squash = actor.encoder.network[-2:]
            assert isinstance(norm, torch.nn.LayerNorm) and isinstance(squash, torch.nn.Tanh)
        else:
            assert out.shape == (16, 512) and out.min() >= 0


def test_random_shift_moves_each_image_by_its_own_offset_within_the_padding():
    images = torch.arange(2 * 1 * 6 * 6, dtype=torch.uint8).reshape(2, 1, 6, 6)
    shifted = random_shift(images, torch.tensor([[2, 2], [0, 4]]), 2)
    assert torch.equal(shifted[0], images[0].float())  # offset (pad, pad): the image itself
    assert torch.equal(shifted[1, 0, 2:, :4], images[1, 0, :4, 2:].float())  # up-left by 2: edges repeated


# -- a serial run and its artifact -------------------------------------------------------------------------------

TOY = [
    "algo=sac",
    f"env={PENDULUM}",
    "+env.kwargs.pixels=true",
    "device=cpu",
    "actors=1",
    "seed=1",
    "steps=300",
    "topology.envs_per_actor=1",
    "actor.chunk_steps=50",
    "algo.batch_size=32",
    "algo.learning_starts=200",
    "learner.eval_episodes=1",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from surreal.run.serial import run_serial

    torch.set_num_threads(1)
    cfg = load_config(TOY)
    run_dir = tmp_path_factory.mktemp("pendulum")
    return cfg, run_dir, run_serial(cfg, run_dir)


def test_a_serial_pixel_sac_run_completes_and_writes_a_cnn_artifact(trained):
    cfg, run_dir, result = trained
    assert result is not None and result["env_steps"] == 300 and result["updates"] >= 50, result
    header, tensors = read_policy_file(run_dir / POLICY_DIR / FILE_NAME)
    assert header["network"]["kind"] == "cnn" and header["network"]["encoder"] == "nature"
    assert header["observation_space"]["shape"] == [9, 84, 84] and header["observation_space"]["dtype"] == "uint8"
    assert any(name.startswith("actor/encoder.") for name in tensors)
    assert header["env"] == {"id": PENDULUM, "kwargs": {"pixels": True}}


ACT_IN_A_FRESH_PROCESS = """
import json, sys
import numpy as np
import surreal
from surreal.envs import make_vec_env
from surreal.envs_pixels import PixelEnv

policy = surreal.load_policy(sys.argv[1])
envs = make_vec_env(sys.argv[2], 2, 0, json.loads(sys.argv[3]))
obs, _ = envs.reset(seed=[0, 1])
seen, actions = [], []
for _ in range(20):
    seen.append(obs)
    actions.append(policy.act(obs))
    obs, *_ = envs.step(actions[-1])
np.save(sys.argv[4], np.array(seen))
np.save(sys.argv[5], np.array(actions))
"""


def learners_policy(cfg, run_dir: Path) -> SACPolicy:
    """The policy the learner's final evaluation ran: its last checkpoint's learner, `params()` into the policy."""
    spaces = spaces_of()
    learner = SACLearner(*spaces, algo_config(cfg), torch.device("cpu"))
    newest = CheckpointStore(run_dir / "checkpoints", 1).paths()[-1]
    learner.load_state_dict(torch.load(newest, map_location="cpu", weights_only=True)["learner"])
    policy = SACPolicy(*spaces, algo_config(cfg), actor_index=0)
    policy.load_params(learner.params())
    return policy


def test_the_cnn_sac_artifact_alone_in_a_fresh_process_acts_as_the_learners_policy_bit_for_bit(trained, tmp_path):
    cfg, run_dir, _ = trained
    alone = tmp_path / "alone" / FILE_NAME
    alone.parent.mkdir()
    alone.write_bytes((run_dir / POLICY_DIR / FILE_NAME).read_bytes())
    outputs = [str(tmp_path / "seen.npy"), str(tmp_path / "actions.npy")]
    subprocess.run(
        [sys.executable, "-c", ACT_IN_A_FRESH_PROCESS, str(alone), PENDULUM, json.dumps(PIXELS), *outputs],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    seen, actions = np.load(outputs[0]), np.load(outputs[1])
    assert seen.dtype == np.uint8 and seen.shape == (20, 2, 9, 84, 84)
    expected = np.stack([learners_policy(cfg, run_dir).act_deterministic(obs) for obs in seen])
    assert np.array_equal(actions, expected), f"max difference {np.abs(actions - expected).max()}"
    assert np.ptp(expected) > 0, "the actions vary with the images"


def test_the_cnn_sac_exports_take_uint8_and_agree_with_the_artifact_within_1e_5(trained, tmp_path):
    import onnxruntime as ort

    _, run_dir, _ = trained
    policy = load_policy(run_dir)
    envs = make_vec_env(PENDULUM, 4, 2, PIXELS)
    observations = [envs.reset(seed=[2, 3, 4, 5])[0]]
    for _ in range(5):
        observations.append(envs.step(envs.action_space.sample())[0])
    envs.close()
    flat = np.concatenate(observations)
    expected = policy.act(flat)
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "p.pt")]) == 0
    sidecar = json.loads((tmp_path / "p.onnx.json").read_text())
    assert sidecar["input"] == {"name": "obs", "shape": ["batch", 9, 84, 84], "dtype": "uint8"}
    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    (onnx_actions,) = session.run(None, {"obs": flat})
    with torch.no_grad():
        script_actions = torch.jit.load(str(tmp_path / "p.pt"))(torch.from_numpy(flat)).numpy()
    for actions in (onnx_actions, script_actions):
        assert np.abs(actions - expected).max() <= 1e-5


def test_surreal_eval_scores_the_cnn_sac_policy_and_records_its_camera(trained, tmp_path):
    _, run_dir, _ = trained
    out = tmp_path / "eval"
    assert main(["eval", str(run_dir), "--episodes", "2", "--video", str(out)]) == 0
    scored = json.loads((out / "eval.json").read_text())
    assert scored["eval_episodes"] == 2 and scored["eval_return_mean"] > 0
    assert len(list(out.glob("*.mp4"))) == 2
