"""PPO from pixels through the whole stack: the encoders, frames on the wire and in the FIFO, the learner's rebuilt
stacks, a serial Atari run, its artifact in a fresh process, the exports, `surreal eval --video`, and what is refused.

The serial run is a toy (ALE/Pong-v5, 1,024 env steps = 4,096 frames, episodes cut at 400 frames, four updates of
256 transitions): it checks that everything around a CNN policy works, not that it learns (bench/atari_ppo.py
measures that side, with a results file).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from bench.frames import RandomPolicy

from surreal.algos.encoders import ImpalaCNN, NatureCNN, make_encoder
from surreal.algos.ppo.chunk_tensors import observations
from surreal.algos.ppo.config import ENCODERS, PPOConfig
from surreal.algos.ppo.learner import PPOLearner
from surreal.algos.ppo.policy import PPOPolicy, chunk_fields, make_collector
from surreal.cli import main
from surreal.config import algo_config, load_config
from surreal.envs import make_vec_env
from surreal.policy.artifact import FILE_NAME, POLICY_DIR, read_policy_file
from surreal.policy.load import load_policy
from surreal.proto.channels import frames_of
from surreal.proto.codec import Limits, ProtocolError, decode, flatten
from surreal.proto.wire import (
    PER_CHUNK,
    Chunk,
    FifoReply,
    ReplyLayout,
    check_fields,
    decode_chunk,
    decode_sample_reply,
    encode_chunk,
    encode_sample_reply,
    fields_of,
    layout_of,
)
from surreal.replay.buffers import ChunkFifo
from surreal.replay.shard import ReplayShard
from surreal.roles.replay import ReplayCore
from surreal.runtime.checkpoint import CheckpointStore
from surreal.runtime.frame_chunks import FRAMES_FIELD, NEXT_INDEX, OBS_INDEX, frame_fields, unpack
from surreal.runtime.rollout import RolloutCollector

PONG, BREAKOUT = "ALE/Pong-v5", "ALE/Breakout-v5"
SHORT = {"max_num_frames_per_episode": 400}  # 100 env steps an episode: episode ends within a short roll
TOY = [
    "algo=ppo",
    f"env={PONG}",
    "+env.kwargs.max_num_frames_per_episode=400",
    "device=cpu",
    "actors=1",
    "seed=1",
    "steps=1024",
    "topology.envs_per_actor=2",
    "actor.chunk_steps=64",
    "algo.batch_size=256",
    "algo.minibatch_size=64",
    "algo.update_epochs=1",
    "learner.eval_episodes=2",
]


def spaces_of(env_id: str = PONG, **kwargs: Any) -> tuple[Any, Any]:
    envs = make_vec_env(env_id, 1, 0, kwargs)
    try:
        return envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()


class Scripted(RandomPolicy):
    """Actions from a seeded generator, whatever the observations: two collectors given equal envs step them alike.
    Records what PPO's policy records."""

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions, _ = super().act(obs)
        return actions, {"actions": actions.astype(np.int64), "logprobs": np.zeros(self.envs, np.float32)}


def wired(chunk: Chunk, limits: Limits | None = None) -> Chunk:
    """`chunk` as a peer receives it: encoded, framed, decoded and validated."""
    return decode_chunk(decode(frames_of(encode_chunk(chunk, "")), limits or Limits()))


# -- the encoders ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 84, 84), (3, 84, 84), (1, 64, 96)])
@pytest.mark.parametrize("kind", sorted(ENCODERS))
def test_an_encoder_takes_uint8_images_of_any_leading_shape_and_its_widths_are_what_the_config_says(kind, shape):
    """The torch-free widths the artifact's reader bounds a network with (`encoder_widths`) are the built network's;
    uint8 images and the same values as floats give the same features (the division by 255 is inside)."""
    torch.manual_seed(0)
    encoder = make_encoder(kind, shape)
    dense = [m for m in encoder.network if isinstance(m, torch.nn.Linear)][-1]
    widths = PPOConfig(encoder=kind).encoder_widths(shape)
    assert [dense.in_features, dense.out_features] == widths and encoder.features == ENCODERS[kind] == widths[1]
    images = torch.randint(0, 256, (2, 3, *shape), dtype=torch.uint8)
    features = encoder(images)
    assert features.shape == (2, 3, encoder.features) and features.dtype == torch.float32
    assert torch.equal(features, encoder(images.double()))
    convolutions = [m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convolutions) == {"nature": 3, "impala": 15}[kind]  # IMPALA's 15-layer ResNet
    assert isinstance(encoder, {"nature": NatureCNN, "impala": ImpalaCNN}[kind])


def test_channels_last_gives_the_same_features():
    """The learner lays a GPU's batches out channels-last; the numbers are the same to float rounding (checked on
    the CPU, where the layout is supported too)."""
    torch.manual_seed(0)
    for kind in ENCODERS:
        encoder = make_encoder(kind, (4, 84, 84))
        images = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
        expected = encoder(images)
        encoder.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        encoder.channels_last = True
        torch.testing.assert_close(encoder(images), expected, rtol=0, atol=1e-5)


def test_an_image_too_small_for_the_encoder_is_said_in_one_line():
    import gymnasium as gym

    from surreal.algos.ppo.policy import make_model

    with pytest.raises(ValueError, match=r"^algo.encoder=nature cannot take images of \(4, 16, 16\): "):
        make_model(gym.spaces.Box(0, 255, (4, 16, 16), np.uint8), gym.spaces.Discrete(3), PPOConfig())


# -- frames on the wire, in the FIFO and at the learner -------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [(PONG, {"max_num_frames_per_episode": 100}), (BREAKOUT, {"preset": "dqn"})],
    ids=["pong-truncations", "breakout-lives"],
)
def test_the_stacks_the_learner_rebuilds_equal_the_envs_across_episode_ends(env_id, kwargs):
    """PPO's collector packs each frame once; through the wire, a FIFO holding the layout and a learner's reply
    decode, the learner's stacks on its device are the env's, step for step: across truncations (Pong cut at 25
    steps), across lost lives that play on (Breakout's dqn preset: a life's first stack is not one frame repeated)
    and across chunk boundaries."""
    T, K, chunks = 64, 2, 3
    spaces = spaces_of(env_id, **kwargs)
    cfg = PPOConfig()
    fields = chunk_fields(*spaces, cfg)
    assert set(fields) >= {FRAMES_FIELD, OBS_INDEX, NEXT_INDEX} and "obs" not in fields
    n = int(spaces[1].n)
    packed = RolloutCollector(make_vec_env(env_id, K, 3, kwargs), Scripted(n, K, 7), T, 0, frames=True)
    plain = RolloutCollector(make_vec_env(env_id, K, 3, kwargs), Scripted(n, K, 7), T, 0)
    shard = ReplayShard("fifo", 10_000, layout=fields_of(layout_of(fields)))
    learner = PPOLearner(*spaces, cfg, torch.device("cpu"))
    ends = {"terminated": 0, "truncated": 0}
    frames_per_step = []
    for _ in range(chunks):
        reference = plain.collect(0).arrays
        chunk = packed.collect(0)
        assert reference["obs"].dtype == np.uint8, "image observations are recorded as the uint8 they are"
        frames_per_step.append(len(chunk.arrays[PER_CHUNK]["frames"]) / (T * K))
        for key in ends:
            ends[key] += int(reference[key].sum())
        shard.add(encode_chunk(wired(chunk), ""))
        reply = decode_sample_reply(decode(frames_of(encode_sample_reply(shard.sample(T * K)))), 0)
        reply = decode_sample_reply(decode(frames_of(encode_sample_reply(reply))), 0, layout=ReplyLayout(fields))
        assert isinstance(reply, FifoReply) and reply.refused == [] and len(reply.chunks) == 1
        (received,) = reply.chunks
        rebuilt = observations([received], learner.device)
        assert rebuilt.dtype == torch.uint8
        assert np.array_equal(rebuilt[0].numpy(), reference["obs"]) and np.array_equal(
            rebuilt[1].numpy(), reference["next_obs"]
        )
        unpacked = unpack(received.arrays)
        assert all(np.array_equal(unpacked[k], reference[k]) for k in reference)
    key = "terminated" if env_id == BREAKOUT else "truncated"
    assert ends[key] >= 2, f"episode ends inside the roll: {ends}"
    assert max(frames_per_step) < 1.2, f"about one frame an env step: {frames_per_step}"


def honest_chunk(T: int = 8, K: int = 2, seed: int = 0) -> dict[str, Any]:
    """A well-formed packed PPO chunk of Pong's shapes (4-frame stacks sliding one frame a step)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (K * (T + 4), 84, 84), np.uint8)
    base = (np.arange(K) * (T + 4))[None, :, None] + np.arange(T)[:, None, None] + np.arange(4)[None, None, :]
    return {
        PER_CHUNK: {"frames": frames},
        OBS_INDEX: base.astype(np.int32),
        NEXT_INDEX: (base + 1).astype(np.int32),
        "rewards": np.zeros((T, K), np.float32),
        "terminated": np.zeros((T, K), bool),
        "truncated": np.zeros((T, K), bool),
        "actions": rng.integers(0, 6, (T, K)),
        "logprobs": np.zeros((T, K), np.float32),
    }


def hostile_chunks() -> dict[str, dict[str, Any]]:
    """What no honest actor sends, each otherwise well formed: frames of another shape or dtype, indices past the
    chunk's frames or negative, no frames at all, and whole float stacks in place of frames."""
    bad: dict[str, dict[str, Any]] = {}
    for name, frames in (
        ("frames of another shape", np.zeros((40, 84, 83), np.uint8)),
        ("frames of another dtype", np.zeros((40, 84, 84), np.float32)),
        ("frames without a frame axis", np.zeros((84,), np.uint8)),
    ):
        arrays = honest_chunk()
        arrays[PER_CHUNK]["frames"] = frames
        bad[name] = arrays
    arrays = honest_chunk()
    arrays[NEXT_INDEX] = arrays[NEXT_INDEX].copy()
    arrays[NEXT_INDEX][-1, -1, -1] = len(arrays[PER_CHUNK]["frames"])
    bad["an index past the frames"] = arrays
    arrays = honest_chunk()
    arrays[OBS_INDEX] = -arrays[OBS_INDEX] - 1
    bad["negative indices"] = arrays
    arrays = honest_chunk()
    del arrays[PER_CHUNK]
    bad["no frames"] = arrays
    arrays = {k: v for k, v in honest_chunk().items() if k not in (PER_CHUNK, OBS_INDEX, NEXT_INDEX)}
    arrays["obs"] = arrays["next_obs"] = np.zeros((8, 2, 4, 84, 84), np.float32)
    bad["float stacks"] = arrays
    return bad


def test_a_frame_of_the_wrong_shape_or_dtype_from_a_peer_is_refused_and_counted():
    """At the replay (its FIFO holds the experiment's layout): each hostile chunk is dropped and counted by reason, as
    every malformed message is, and the honest ones around it are kept. At the learner (a FIFO that kept it, one
    without a layout): left out of its reply and listed, the honest chunks packed with it learned from."""
    spaces = spaces_of()
    fields = chunk_fields(*spaces, PPOConfig())
    dropped: list[str] = []
    core = ReplayCore(
        ReplayShard("fifo", 100_000, layout=fields), lambda peer, answer: None, lambda r, p: dropped.append(r)
    )
    bad = hostile_chunks()
    for arrays in [honest_chunk(), *bad.values(), honest_chunk(seed=1)]:
        core.on_experience(encode_chunk(Chunk(arrays, version=0, actor=0), ""))
    assert dropped == ["bad_chunk_fields"] * len(bad), dropped
    assert core.shard.stats()["size"] == 2 * 16, "the two honest chunks are held"

    unchecked = ReplayShard("fifo", 100_000)  # a FIFO without the layout (a config no launcher prepared)
    for arrays in [honest_chunk(), *bad.values(), honest_chunk(seed=1)]:
        unchecked.add(encode_chunk(Chunk(arrays, version=0, actor=0), ""))
    message = decode(frames_of(encode_sample_reply(unchecked.sample(100_000))))
    reply = decode_sample_reply(message, 0, layout=ReplyLayout(fields))
    assert isinstance(reply, FifoReply) and len(reply.chunks) == 2
    assert reply.refused == ["bad_chunk_fields"] * len(bad), reply.refused


def test_a_pong_sized_chunk_keeps_to_the_replays_byte_limits_and_survives_its_snapshot(tmp_path):
    """1,024 env steps of Pong (256 steps x 4 envs) as each frame once are 7.4 MB where float32 stacks were 231 MB:
    the FIFO's capacity in bytes, a reply's `max_message_bytes` (packing, and a chunk over it refused on arrival) and
    the snapshot a stopping shard writes hold at that size."""
    from surreal.replay.snapshot import SnapshotStore

    spaces = spaces_of()
    fields = chunk_fields(*spaces, PPOConfig())
    chunks = [honest_chunk(T=256, K=4, seed=s) for s in range(3)]
    nbytes = sum(a.nbytes for _, a in flatten(chunks[0]))
    assert 7_000_000 < nbytes < 7_600_000, nbytes
    # A reply of at most two chunks, a FIFO of at most two chunks' bytes: the oldest goes.
    limits = Limits(max_bytes=2 * nbytes + 100_000)
    fifo = ChunkFifo(100_000, capacity_bytes=2 * nbytes + 1000, reply=limits, layout=fields)
    for arrays in chunks:
        fifo.add(wired(Chunk(arrays, 0, 0), limits), 1024)
    assert fifo.stats()["dropped"] == 1024 and fifo.num_chunks == 2
    assert fifo.fitting(100_000) == 2
    small = ChunkFifo(100_000, reply=Limits(max_bytes=nbytes // 2), layout=fields)
    with pytest.raises(ProtocolError, match="too_large_for_reply"):
        small.add(Chunk(chunks[0], 0, 0), 1024)

    shard = ReplayShard("fifo", 100_000, layout=fields, reply=limits)
    for arrays in chunks[:2]:
        shard.add(encode_chunk(Chunk(arrays, 0, 0), ""))
    store = SnapshotStore(tmp_path, {"shard": 0})
    captured = shard.capture(guard=0)
    assert captured is not None
    store.save(captured)
    restored = ReplayShard("fifo", 100_000, layout=fields, reply=limits)
    assert store.restore(restored.restore, logging.getLogger("test")) is not None
    reply = restored.sample(100_000)
    assert isinstance(reply, FifoReply) and len(reply.chunks) == 2
    for got, sent in zip(reply.chunks, chunks[:2], strict=True):
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(flatten(got.arrays), flatten(sent), strict=True))


def test_a_layout_of_frames_survives_the_config_and_a_bad_index_is_refused():
    """`replay.layout` carries PPO's frame fields through the config (plain data) and back; an index field must name
    a per-chunk field of the layout."""
    fields = chunk_fields(*spaces_of(), PPOConfig())
    assert fields[OBS_INDEX].index_of == FRAMES_FIELD and fields_of(layout_of(fields)) == fields
    assert fields_of(json.loads(json.dumps(layout_of(fields)))) == fields
    assert frame_fields((3, 84, 84))[FRAMES_FIELD].shape == (84, 84)
    for index_of in ("rewards", "per_chunk/missing"):
        bad = layout_of(fields)
        bad[OBS_INDEX]["index_of"] = index_of
        with pytest.raises(ValueError, match="index_of must name a per-chunk field"):
            fields_of(bad)


def test_a_cnn_learners_checkpoint_resumes_its_next_update_exactly(tmp_path):
    """The learner's state (no observation statistics for images) through a weights-only save and load: the next
    update is the one the learner that never stopped makes."""
    cfg = PPOConfig(batch_size=64, minibatch_size=32, update_epochs=1)
    spaces, chunks = pong_chunks(cfg, 4, seed=4)
    learner = PPOLearner(*spaces, cfg, torch.device("cpu"))
    learner.update(chunks[:2], 0.1)
    assert "obs_rms" not in learner.state_dict() and "obs_norm" not in learner.params()
    torch.save(learner.state_dict(), tmp_path / "ckpt.pt")
    resumed = PPOLearner(*spaces, cfg, torch.device("cpu"))
    resumed.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=True))
    assert resumed.update(chunks[2:], 0.5) == learner.update(chunks[2:], 0.5)
    for (name, a), (_, b) in zip(learner.model.state_dict().items(), resumed.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_the_first_minibatch_of_an_update_sees_what_the_actor_saw():
    """The actor's policy acted on the env's stacks and recorded their log-probabilities; the learner scores the
    stacks it rebuilt from the frames with the same parameters: the ratio is one (approx_kl 0 to float rounding)
    for the first minibatch of the first epoch, whatever the recurrent mode."""
    spaces = spaces_of(PONG, **SHORT)
    for recurrent in (None, "lstm"):
        cfg = PPOConfig(batch_size=128, minibatch_size=128, update_epochs=1, recurrent=recurrent)
        learner = PPOLearner(*spaces, cfg, torch.device("cpu"))
        policy = PPOPolicy(*spaces, cfg, actor_index=0)
        policy.load_params(learner.params())
        envs = make_vec_env(PONG, 2, 5, SHORT)
        chunk = make_collector(envs, policy, cfg, 0, 64).collect(0)
        envs.close()
        check_fields(dict(flatten(chunk.arrays)), chunk_fields(*spaces, cfg), 2, "test")
        stats = learner.update([wired(chunk)], 0.0)
        assert abs(stats["approx_kl"]) < 1e-6 and stats["clipfrac"] == 0.0, (recurrent, stats)


def test_bf16_autocast_updates_near_the_float32_update():
    """`algo.autocast=bf16` runs the forward passes in bfloat16 (on the CPU here, as on a GPU): the update's
    statistics come out finite and near float32's; the parameters stay float32."""
    spaces = spaces_of(PONG, **SHORT)
    envs = make_vec_env(PONG, 2, 5, SHORT)
    chunk = RolloutCollector(envs, Scripted(int(spaces[1].n), 2, 1), 64, 0, frames=True).collect(0)
    envs.close()
    stats = {}
    for autocast in (None, "bf16"):
        cfg = PPOConfig(batch_size=128, minibatch_size=64, update_epochs=1, autocast=autocast)
        learner = PPOLearner(*spaces, cfg, torch.device("cpu"))
        stats[autocast] = learner.update([chunk], 0.0)
        assert all(p.dtype == torch.float32 for p in learner.model.parameters())
    assert stats["bf16"]["nonfinite_skipped"] == 0.0
    for key in ("policy_loss", "value_loss", "entropy"):
        assert stats["bf16"][key] == pytest.approx(stats[None][key], abs=0.05, rel=0.05), key


def test_the_policy_acts_on_a_batch_of_image_observations_from_many_envs():
    """What a central inference worker calls (`PPOPolicy.act` over several actors' observations at once) takes a
    uint8 batch of any size; the actions recorded are the indices the env was given."""
    spaces = spaces_of()
    policy = PPOPolicy(*spaces, PPOConfig(), actor_index=3)
    obs = np.random.default_rng(0).integers(0, 256, (12, 4, 84, 84), np.uint8)
    env_actions, record = policy.act(obs)
    assert env_actions.shape == (12,) and record["actions"].dtype == np.int64 and record["logprobs"].shape == (12,)
    assert np.array_equal(env_actions, record["actions"])
    assert policy.act_deterministic(obs).shape == (12,)


# -- a serial Atari run and its artifact -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from surreal.run.serial import run_serial

    torch.set_num_threads(1)
    cfg = load_config(TOY)
    run_dir = tmp_path_factory.mktemp("pong")
    result = run_serial(cfg, run_dir)
    return cfg, run_dir, result


def test_a_serial_atari_run_completes_and_writes_a_cnn_artifact(trained):
    cfg, run_dir, result = trained
    assert result is not None and result["updates"] == 4 and result["env_steps"] == 1024, result
    header, tensors = read_policy_file(run_dir / POLICY_DIR / FILE_NAME)
    network = header["network"]
    assert network["kind"] == "cnn" and network["encoder"] == "nature" and network["features"] == 512
    assert header["observation_space"] == {"type": "box", "shape": [4, 84, 84], "dtype": "uint8", "low": [0.0],
                                           "high": [255.0]}  # fmt: skip
    assert header["normalizer"] is None and not any(name.startswith("obs_norm") for name in tensors)
    assert header["algo_config"]["encoder"] == "nature"
    assert all(t.dtype == np.float32 for t in tensors.values())
    # Evaluation envs score games: unclipped rewards, whole episodes (here cut at 400 frames).
    assert result["eval_episodes"] == 2 and all(float(r).is_integer() for r in result["eval_returns"])


ROLL = """
import json, sys
import numpy as np
from surreal.envs import make_vec_env

def roll(act, env_id, kwargs, steps=120, seed=0):
    envs = make_vec_env(env_id, 3, seed, kwargs)
    obs, _ = envs.reset(seed=[seed, seed + 1, seed + 2])
    seen, actions, ends = [], [], 0
    for _ in range(steps):
        seen.append(obs)
        actions.append(act(obs))
        obs, _, terminated, truncated, _ = envs.step(actions[-1])
        ends += int((terminated | truncated).sum())
    envs.close()
    return np.array(seen), np.array(actions), ends
"""
ACT_IN_A_FRESH_PROCESS = (
    ROLL
    + """
import surreal, torch
policy = surreal.load_policy(sys.argv[1])
seen, actions, _ = roll(policy.act, sys.argv[2], json.loads(sys.argv[3]))
module = policy.module()
with torch.no_grad():
    logits = module.network(module.preprocess(torch.from_numpy(seen.reshape(-1, *seen.shape[2:])))).numpy()
np.save(sys.argv[4], actions)
np.save(sys.argv[5], logits)
"""
)
_namespace: dict[str, Any] = {}
exec(ROLL, _namespace)
roll = _namespace["roll"]


def learners_policy(cfg, run_dir: Path) -> PPOPolicy:
    """The policy the learner's final evaluation ran: its last checkpoint's learner, `params()` into the policy."""
    spaces = spaces_of(PONG, **SHORT)
    learner = PPOLearner(*spaces, algo_config(cfg), torch.device("cpu"))
    newest = CheckpointStore(run_dir / "checkpoints", 1).paths()[-1]
    learner.load_state_dict(torch.load(newest, map_location="cpu", weights_only=True)["learner"])
    policy = PPOPolicy(*spaces, algo_config(cfg), actor_index=0)
    policy.load_params(learner.params())
    return policy


def logits_of(module: torch.nn.Module, observations: np.ndarray) -> np.ndarray:
    """A deterministic policy module's logits (before the argmax) for a roll's observations [steps, envs, ...]."""
    with torch.no_grad():
        flat = torch.from_numpy(observations.reshape(-1, *observations.shape[2:]))
        return module.network(module.preprocess(flat)).numpy()  # type: ignore[operator]


def test_the_cnn_artifact_alone_in_a_fresh_process_acts_as_the_learners_policy_bit_for_bit(trained, tmp_path):
    """The artifact's traced actions and its network's logits (which vary with the observations even where a toy
    run's argmax does not) are the learner's policy's, bit for bit, over whole episodes and the resets after them."""
    cfg, run_dir, _ = trained
    alone = tmp_path / "alone" / FILE_NAME
    alone.parent.mkdir()
    alone.write_bytes((run_dir / POLICY_DIR / FILE_NAME).read_bytes())  # nothing else of the run goes along
    outputs = [str(tmp_path / "a.npy"), str(tmp_path / "l.npy")]
    subprocess.run(
        [sys.executable, "-c", ACT_IN_A_FRESH_PROCESS, str(alone), PONG, json.dumps(SHORT), *outputs],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    actions, logits = np.load(outputs[0]), np.load(outputs[1])
    policy = learners_policy(cfg, run_dir)
    seen, expected, ends = roll(policy.act_deterministic, PONG, SHORT)
    assert ends >= 3, "every env's episode ends within the roll, and the env acts on after its reset"
    assert actions.shape == expected.shape and actions.dtype == expected.dtype
    assert np.array_equal(actions, expected), f"{(actions != expected).sum()} of {actions.size} actions differ"
    expected_logits = logits_of(policy.inference_module(), seen)
    assert np.array_equal(logits, expected_logits), f"max difference {np.abs(logits - expected_logits).max()}"
    assert np.ptp(expected_logits, axis=0).min() > 0, "the logits vary with the observations"


def onnx_with_logits(path: Path) -> ort.InferenceSession:
    """The exported ONNX graph with its ArgMax's input (the logits) as a second output, to compare before the
    argmax."""
    import onnx

    model = onnx.load(str(path))
    (argmax,) = [node for node in model.graph.node if node.op_type == "ArgMax"]
    model.graph.output.append(onnx.helper.make_tensor_value_info(argmax.input[0], onnx.TensorProto.FLOAT, None))
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_the_cnn_exports_take_uint8_and_agree_with_the_artifact_within_1e_5(trained, tmp_path):
    """ONNX and TorchScript files of a CNN policy take uint8 stacks; on a roll's observations their logits are the
    artifact's within 1e-5 and their actions (the argmax) the artifact's."""
    _, run_dir, _ = trained
    policy = load_policy(run_dir)
    observations, expected, _ = roll(policy.act, PONG, SHORT, seed=1)
    expected_logits = logits_of(policy.module(), observations)
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "p.pt")]) == 0
    sidecar = json.loads((tmp_path / "p.onnx.json").read_text())
    assert sidecar["input"] == {"name": "obs", "shape": ["batch", 4, 84, 84], "dtype": "uint8"}
    assert sidecar["normalizer_folded_in"] is False
    session = onnx_with_logits(tmp_path / "p.onnx")
    assert session.get_inputs()[0].type == "tensor(uint8)"
    flat = observations.reshape(-1, *observations.shape[2:])
    onnx_actions, onnx_logits = session.run(None, {"obs": flat})
    scripted = torch.jit.load(str(tmp_path / "p.pt"))
    with torch.no_grad():
        script_actions = scripted(torch.from_numpy(flat)).numpy()
        inner = scripted.inner
        script_logits = inner.network(inner.preprocess(torch.from_numpy(flat))).numpy()
    for actions, logits in ((onnx_actions, onnx_logits), (script_actions, script_logits)):
        assert np.abs(logits - expected_logits).max() <= 1e-5
        assert np.array_equal(actions, expected.reshape(-1).astype(np.float32))


def test_surreal_eval_scores_games_and_records_pong(trained, tmp_path):
    """`surreal eval` replays the run's final evaluation (evaluation envs: game scores); `--video` writes one MP4
    per episode from the game's own RGB screen."""
    cfg, run_dir, result = trained
    out = tmp_path / "eval.json"
    args = ["eval", str(run_dir), "--episodes", "2", "--seed", str(cfg.seed), "--json", str(out)]
    assert main(args) == 0
    assert json.loads(out.read_text())["eval_returns"] == result["eval_returns"]
    videos = tmp_path / "videos"
    assert (
        main(["eval", str(run_dir), "--episodes", "1", "--video", str(videos), "--json", str(tmp_path / "v.json")]) == 0
    )
    recorded = json.loads((tmp_path / "v.json").read_text())
    assert [Path(p).name for p in recorded["videos"]] == ["env0-episode-1.mp4"]
    assert (videos / "env0-episode-1.mp4").stat().st_size > 1000


# -- the learner's compiled and GPU paths --------------------------------------------------------------------------


def pong_chunks(cfg: PPOConfig, count: int, seed: int) -> tuple[Any, list[Chunk]]:
    """Pong's spaces and `count` packed chunks of 32 steps x 2 envs from a scripted collector."""
    spaces = spaces_of(PONG, **SHORT)
    envs = make_vec_env(PONG, 2, seed, SHORT)
    collector = RolloutCollector(envs, Scripted(int(spaces[1].n), 2, seed), 32, 0, frames=True)
    chunks = [collector.collect(0) for _ in range(count)]
    envs.close()
    return spaces, chunks


@pytest.mark.slow
def test_the_compiled_cnn_update_matches_the_eager_one():
    """`learner.compile=true` compiles the loss with the encoder in it (inductor on the CPU: a minute or more here);
    two updates give the eager numbers to 1e-4."""
    cfg = PPOConfig(batch_size=64, minibatch_size=32, update_epochs=2)
    spaces, chunks = pong_chunks(cfg, 4, seed=2)
    eager, compiled = (PPOLearner(*spaces, cfg, torch.device("cpu"), compile=c) for c in (False, True))
    for batch in (chunks[:2], chunks[2:]):
        stats_eager, stats_compiled = eager.update(batch, 0.1), compiled.update(batch, 0.1)
    assert compiled.compile, "the compiled step fell back to eager"
    assert stats_compiled == pytest.approx(stats_eager, abs=1e-4)
    for (name, a), (_, b) in zip(eager.model.state_dict().items(), compiled.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4, msg=name)


@pytest.mark.gpu
def test_cuda_cnn_update_channels_last_compiled_and_bf16():
    """On CUDA the learner's convolutions run channels-last; the compiled (graph-captured) update gives the eager
    numbers, and bf16 autocast a finite first update near float32's."""
    cfg = PPOConfig(batch_size=64, minibatch_size=32, update_epochs=2)
    spaces, chunks = pong_chunks(cfg, 4, seed=3)
    cuda = torch.device("cuda")
    eager, graphed = (PPOLearner(*spaces, cfg, cuda, compile=c) for c in (False, True))
    assert eager.model.encoder.channels_last
    conv = next(m for m in eager.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    first = None
    for progress, batch in ((0.1, chunks[:2]), (0.6, chunks[2:])):
        stats_eager, stats_graphed = eager.update(batch, progress), graphed.update(batch, progress)
        first = first or stats_eager
    assert graphed.compile and graphed.step_fn.graph is not None
    assert stats_graphed == pytest.approx(stats_eager, abs=1e-3)
    bf16 = PPOLearner(*spaces, PPOConfig(batch_size=64, minibatch_size=32, update_epochs=2, autocast="bf16"), cuda)
    stats = bf16.update(chunks[:2], 0.1)
    assert stats["nonfinite_skipped"] == 0.0
    assert stats["value_loss"] == pytest.approx(first["value_loss"], rel=0.1)
