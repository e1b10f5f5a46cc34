"""The contract every registered algorithm keeps, one parametrized suite over all of them (SB3's idea).

For each variant (an algorithm of `ALGORITHMS` with each action-space kind it declares, plus the modes and presets
that change its networks or its update: recurrent PPO, TD3, CrossQ):

- its collectors' chunks hold exactly the fields it declares (`chunk_fields`), which the wire and the replay hold
  every chunk and reply to;
- preflight takes the spaces it declares and refuses the others in one line;
- a short serial run learns past a low bar: its deterministic evaluation beats a uniformly random policy's, on the
  same episodes, by a margin;
- its policy artifact, alone in a fresh process, acts as the learner's policy does, bit for bit, over whole
  episodes (a recurrent policy's state reset for the envs whose episode ended);
- its ONNX and TorchScript exports agree with the artifact within 1e-5 (fed back their state, where they have one);
- `surreal eval` replays the run's final evaluation;
- a serial run stopped and resumed ends as the run never stopped, bit for bit: every checkpointed leaf and
  metrics.jsonl (tests/test_resume.py holds the comparison and the lock-step and damaged-checkpoint cases).

A newly registered algorithm gets all of these by being registered: its variants come from the registry (an env per
action-space kind it declares) and run at its packaged defaults on a small budget, unless `TOY` gives it smaller
networks and batches to keep the suite fast.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from surreal.algos import get_algorithm
from surreal.cli import main
from surreal.config import ConfigError, algo_config, load_config
from surreal.config.schema import ALGORITHMS, OffPolicyConfig
from surreal.envs import env_spaces, make_env, make_vec_env
from surreal.policy.artifact import FILE_NAME, POLICY_DIR, read_policy_file
from surreal.policy.load import load_policy
from surreal.proto.codec import flatten
from surreal.proto.wire import check_fields
from surreal.roles.evaluation import EVAL_SEED_OFFSET
from surreal.run.preflight import preflight
from surreal.run.serial import run_serial
from surreal.runtime.checkpoint import CheckpointStore
from surreal.runtime.rollout import evaluate
from test_resume import assert_resumed_as_straight, final_checkpoint

# The env a variant learns on, by the action-space kind it takes; and how far above a uniformly random policy's
# return on the same episodes its deterministic evaluation must end (a random policy scores about 5-10 on
# InvertedPendulum-v5 and about 20 on CartPole-v1, both of whose maxima are far above the bar).
ENVS = {"box": "InvertedPendulum-v5", "discrete": "CartPole-v1"}
MARGIN = 40.0
# Smaller networks and batches than the packaged defaults, so a variant learns past the bar in seconds.
TOY = {
    "ppo": ["algo.hidden_sizes=[32,32]", "algo.batch_size=512", "algo.minibatch_size=128", "steps=8192"]
    + ["topology.envs_per_actor=2", "actor.chunk_steps=256"],
    "ddpg": ["algo.hidden_sizes=[64,64]", "algo.learning_starts=500", "actor.chunk_steps=50", "steps=2500"],
    "sac": ["algo.hidden_sizes=[64,64]", "algo.critic_hidden_sizes=[64,64]", "algo.learning_starts=500"]
    + ["actor.chunk_steps=50", "steps=2500"],
    "es": ["algo.hidden_sizes=[16]", "algo.noise_table_size=1000000", "algo.batch_size=16", "algo.pairs_per_chunk=4"]
    + ["steps=20000"],
}
OFF_POLICY_DEFAULT = ["algo.learning_starts=500", "actor.chunk_steps=50", "steps=2500"]
ON_POLICY_DEFAULT = ["steps=8192"]
COMMON = ["device=cpu", "actors=1", "seed=1", "learner.eval_episodes=5"]


@dataclass(frozen=True)
class Variant:
    name: str
    algorithm: str
    action_kind: str
    overrides: tuple[str, ...]  # on top of the algorithm's toy sizes

    @property
    def env_id(self) -> str:
        return ENVS[self.action_kind]

    @property
    def recurrent(self) -> bool:
        return any(o.startswith("algo.recurrent=") for o in self.overrides)

    def config_overrides(self) -> list[str]:
        """What the serial run of this variant is given: the algorithm (or the preset that picks it), its env, its
        toy sizes, then the variant's own."""
        chooser = next((o for o in self.overrides if o.startswith("preset=")), f"algo={self.algorithm}")
        default = OFF_POLICY_DEFAULT if issubclass(ALGORITHMS[self.algorithm], OffPolicyConfig) else ON_POLICY_DEFAULT
        toy = TOY.get(self.algorithm, default)
        return [chooser, f"env={self.env_id}", *COMMON, *toy, *(o for o in self.overrides if o != chooser)]


def variants() -> dict[str, Variant]:
    """Every registered algorithm with each action-space kind it takes, then the modes and presets."""
    found = {
        f"{name}-{kind}": Variant(f"{name}-{kind}", name, kind, ())
        for name, config in sorted(ALGORITHMS.items())
        for kind in sorted(config.action_spaces)
        if kind in ENVS
    }
    extra = [
        Variant(
            "ppo-lstm", "ppo", "box", ("algo.recurrent=lstm", "algo.rnn_hidden_size=16", "algo.minibatch_size=256")
        ),
        Variant("ddpg-td3", "ddpg", "box", ("algo.twin_critics=true", "algo.target_policy_noise=0.2")),
        Variant("sac-crossq", "sac", "box", ("preset=crossq", "algo.critic_hidden_sizes=[64,64]")),
    ]
    return found | {v.name: v for v in extra}


VARIANTS = variants()


def test_every_registered_algorithm_and_every_action_kind_it_takes_is_a_variant():
    for name, config in ALGORITHMS.items():
        for kind in config.action_spaces:
            assert f"{name}-{kind}" in VARIANTS, f"algo={name} takes {kind} actions: give ENVS an env for them"


# -- the fields a collector makes ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_collectors_chunks_hold_exactly_the_fields_the_algorithm_declares(name):
    """The learner, the replay's layout (`replay.layout`) and the wire hold every chunk to `chunk_fields`: what an
    honest actor makes must be exactly that, name, dtype, shape and bounds."""
    cfg = load_config(VARIANTS[name].config_overrides())
    module, spaces = get_algorithm(cfg.algo.name), env_spaces(cfg)
    envs = make_vec_env(cfg.env.id, 2, cfg.seed)
    try:
        policy = module.make_policy(*spaces, algo_config(cfg), 0, 1)
        collector = module.make_collector(envs, policy, algo_config(cfg), 0, 8)
        chunks = [collector.collect(0) for _ in range(2)]  # the second continues the first's episodes
    finally:
        envs.close()
    fields = module.chunk_fields(*spaces, algo_config(cfg))
    for chunk in chunks:
        leaves = dict(flatten(chunk.arrays))
        assert leaves.keys() == fields.keys()
        check_fields(leaves, fields, 2, "bad_chunk_fields")


# -- preflight ---------------------------------------------------------------------------------------------------

# An env for each pair of (observation, action) kinds: what preflight must take or refuse.
PREFLIGHT_ENVS = {
    ("box", "box"): "Pendulum-v1",
    ("box", "discrete"): "CartPole-v1",
    ("discrete", "discrete"): "FrozenLake-v1",
}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_preflight_takes_the_spaces_an_algorithm_declares_and_refuses_the_others_in_one_line(algorithm):
    config = ALGORITHMS[algorithm]
    for (obs_kind, act_kind), env_id in PREFLIGHT_ENVS.items():
        cfg = load_config([f"algo={algorithm}", f"env={env_id}"])
        if obs_kind in config.observation_spaces and act_kind in config.action_spaces:
            preflight(cfg)  # takes it (warnings, if any, are strings)
            continue
        with pytest.raises(ConfigError) as refused:
            preflight(cfg)
        line = str(refused.value)
        assert line.startswith(f"algo={algorithm} takes ") and env_id in line and "\n" not in line, line


# -- a trained policy ----------------------------------------------------------------------------------------------


@dataclass
class Trained:
    variant: Variant
    cfg: object
    run_dir: Path
    result: dict


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def trained(request, tmp_path_factory) -> Trained:
    """A short serial run of the variant (the learning bar's run), shared by the artifact, export and eval checks."""
    torch.set_num_threads(1)
    variant = VARIANTS[request.param]
    cfg = load_config(variant.config_overrides())
    run_dir = tmp_path_factory.mktemp(variant.name)
    result = run_serial(cfg, run_dir)
    assert result is not None and result["updates"] >= 2, result
    return Trained(variant, cfg, run_dir, result)


class RandomActor:
    """A uniformly random policy on the env's action space: the learning bar's baseline."""

    def __init__(self, env_id: str, seed: int) -> None:
        env = make_env(env_id, seed)
        self.space = env.action_space
        env.close()
        self.space.seed(seed)

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return np.stack([self.space.sample() for _ in range(len(obs))])


@pytest.mark.system  # a serial run of the variant (the module's `trained`)
def test_a_short_serial_run_learns_past_a_low_bar(trained):
    cfg, result = trained.cfg, trained.result
    random = evaluate(cfg.env.id, RandomActor(cfg.env.id, 0), len(result["eval_returns"]), cfg.seed + EVAL_SEED_OFFSET)
    baseline = random.summary()["eval_return_mean"]
    learned = result["eval_return_mean"]
    print(f"{trained.variant.name}: {learned:.1f} after {result['env_steps']} env steps; random {baseline:.1f}")
    assert result["eval_return_mean"] >= baseline + MARGIN, (result["eval_return_mean"], baseline)


# Whole episodes in 3 envs, `act` for the batch and `reset(done)` for the envs whose episode ended: rolled here with
# the learner's policy and in a fresh process with the artifact, so both run the same loop. 1,100 steps outlast the
# time limit of both envs (1,000 and 500 steps), so every env acts after a reset even under a policy that never falls.
ROLL = """
import numpy as np
from surreal.envs import make_vec_env

def roll(act, reset, env_id, steps=1100, seed=0):
    envs = make_vec_env(env_id, 3, seed)
    obs, _ = envs.reset(seed=[seed, seed + 1, seed + 2])
    reset(None)
    actions, ends = [], 0
    for _ in range(steps):
        actions.append(act(obs))
        obs, _, terminated, truncated, _ = envs.step(actions[-1])
        done = terminated | truncated
        ends += int(done.sum())
        if done.any():
            reset(done)
    envs.close()
    return np.array(actions), ends
"""
ACT_IN_A_FRESH_PROCESS = (
    ROLL
    + """
import sys, surreal
policy = surreal.load_policy(sys.argv[1])
actions, _ = roll(policy.act, policy.reset, sys.argv[2])
np.save(sys.argv[3], actions)
"""
)
_namespace: dict = {}
exec(ROLL, _namespace)
roll = _namespace["roll"]


def learners_policy(trained: Trained):
    """The policy the learner's final evaluation ran: its last checkpoint's learner, `params()` into `make_policy`."""
    cfg = trained.cfg
    spaces = env_spaces(cfg)
    algo = get_algorithm(cfg.algo.name)
    learner = algo.make_learner(*spaces, algo_config(cfg), torch.device("cpu"))
    newest = CheckpointStore(trained.run_dir / "checkpoints", 1).paths()[-1]
    learner.load_state_dict(torch.load(newest, map_location="cpu", weights_only=True)["learner"])
    policy = algo.make_policy(*spaces, algo_config(cfg), 0, 1)
    policy.load_params(learner.params())
    return policy


def no_reset(done):
    return None


@pytest.mark.system  # a serial run of the variant (the module's `trained`)
def test_the_artifact_alone_in_a_fresh_process_acts_as_the_learner_bit_for_bit(trained, tmp_path):
    cfg = trained.cfg
    alone = tmp_path / "alone" / FILE_NAME
    alone.parent.mkdir()
    shutil.copy(trained.run_dir / POLICY_DIR / FILE_NAME, alone)  # nothing else of the run goes along
    subprocess.run(
        [sys.executable, "-c", ACT_IN_A_FRESH_PROCESS, str(alone), cfg.env.id, str(tmp_path / "a.npy")],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    loaded = np.load(tmp_path / "a.npy")
    policy = learners_policy(trained)
    expected, ends = roll(policy.act_deterministic, getattr(policy, "reset", no_reset), cfg.env.id)
    assert ends >= 3, "every env's episode ends within the roll, and the env acts on after its reset"
    assert loaded.shape == expected.shape and loaded.dtype == expected.dtype
    assert np.array_equal(loaded, expected), f"max difference {np.abs(loaded - expected).max()}"
    assert len(np.unique(expected)) > 1, "the actions vary with the observations"

    header = read_policy_file(alone)[0]
    assert header["algorithm"] == cfg.algo.name and header["env"]["id"] == cfg.env.id
    assert header["updates"] == trained.result["updates"] and header["env_steps"] == trained.result["env_steps"]
    assert header["evaluation"]["return_mean"] == trained.result["eval_return_mean"]


def recorded(policy, env_id: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The artifact's whole episodes in 3 envs: (observations, actions, which envs' episodes ended after each step).
    The exports are fed these very observations (a closed loop would amplify float32 against float64 rounding
    into other trajectories) and reset where these episodes ended."""
    seen: list[np.ndarray] = []
    ended: list[np.ndarray] = []
    resets = [np.zeros(3, bool)]

    def act(obs):
        seen.append(obs.copy())
        ended.append(resets[-1].copy())
        resets[-1][:] = False
        return policy.act(obs)

    def reset(done):
        if done is not None:
            resets[-1] |= done
        policy.reset(done)

    actions, _ = roll(act, reset, env_id, seed=1)
    return np.array(seen), actions, np.array(ended)


@pytest.mark.system  # a serial run of the variant (the module's `trained`)
def test_the_exports_agree_with_the_artifact_within_1e_5(trained, tmp_path):
    cfg, run_dir = trained.cfg, trained.run_dir
    policy = load_policy(run_dir)
    observations, expected, ended = recorded(policy, cfg.env.id)
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "p.pt")]) == 0
    sidecar = json.loads((tmp_path / "p.onnx.json").read_text())
    assert sidecar["input"]["shape"] == ["batch", *policy.observation_space.shape]
    assert sidecar["normalizer_folded_in"] == (policy.metadata["normalizer"] is not None)
    state_shape = sidecar["state_input"]["shape"][1:] if "state_input" in sidecar else None
    assert (state_shape is not None) == trained.variant.recurrent

    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    scripted = torch.jit.load(str(tmp_path / "p.pt"))

    def onnx_step(obs, state):
        if state is None:
            return session.run(None, {"obs": obs})[0], None
        actions, state = session.run(None, {"obs": obs, "state": state})
        return actions, state

    def script_step(obs, state):
        with torch.no_grad():
            if state is None:
                return scripted(torch.from_numpy(obs)).numpy(), None
            actions, state = scripted(torch.from_numpy(obs), torch.from_numpy(state))
            return actions.numpy(), state.numpy()

    for step in (onnx_step, script_step):
        state = None if state_shape is None else np.zeros((3, *state_shape), np.float32)
        actions = []
        for obs, done in zip(observations, ended, strict=True):
            if state is not None:
                state[done] = 0.0  # the envs whose episode ended start the next one afresh
            action, state = step(obs.astype(np.float32), state)
            actions.append(action)
        got = np.array(actions)
        if expected.dtype.kind == "f":
            assert np.abs(got - expected).max() <= 1e-5, step.__name__
        else:  # discrete actions: the argmax of outputs that agree within 1e-5
            assert np.array_equal(got, expected), step.__name__


@pytest.mark.system  # a serial run of the variant (the module's `trained`)
def test_surreal_eval_replays_the_runs_final_evaluation(trained, tmp_path):
    cfg, result = trained.cfg, trained.result
    out = tmp_path / "eval.json"
    episodes = str(len(result["eval_returns"]))
    assert (
        main(["eval", str(trained.run_dir), "--episodes", episodes, "--seed", str(cfg.seed), "--json", str(out)]) == 0
    )
    assert json.loads(out.read_text())["eval_returns"] == result["eval_returns"]


# -- resume ------------------------------------------------------------------------------------------------------

# Where a stop is hard to carry over: two actors running ahead (chunks queued in an on-policy feed, a sample half
# stepped through in an off-policy one), envs mid-episode, and the variant's own state (a recurrent state, prioritized
# replay's sum tree with n-step returns and OU noise, CrossQ's running statistics). (overrides, stop at k, end at n)
ON_POLICY_RESUME = ["actors=2", "actor.chunk_steps=32", "algo.batch_size=80", "algo.minibatch_size=16"]
ON_POLICY_RESUME += ["algo.update_epochs=2", "topology.envs_per_actor=1"]
OFF_POLICY_RESUME = ["actors=2", "actor.chunk_steps=10", "algo.learning_starts=200", "algo.batch_size=32"]
OFF_POLICY_RESUME += ["algo.replay_ratio=0.3", "algo.publish_interval=5", "replay.capacity=4000"]
RESUME = {
    "ppo": (ON_POLICY_RESUME, 5, 10),
    "ppo-lstm": ([*ON_POLICY_RESUME, "algo.minibatch_size=32"], 5, 10),
    "ddpg": (OFF_POLICY_RESUME, 71, 260),
    "ddpg-box": ([*OFF_POLICY_RESUME, "algo.n_step=3", "algo.noise_type=ou", "replay.mode=prioritized"], 71, 260),
    "sac": (OFF_POLICY_RESUME, 71, 260),
    "sac-crossq": ([*OFF_POLICY_RESUME, "algo.renorm_warmup=4"], 71, 260),
    "es": (["deterministic=true", "topology.envs_per_actor=2", "algo.batch_size=8"], 2, 6),
}
RESUME_COMMON = ["seed=5", "steps=10000000", "learner.checkpoint_interval=1000", "learner.keep_checkpoints=5"]


@pytest.mark.system
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_serial_run_stopped_and_resumed_ends_as_the_run_never_stopped(tmp_path, name):
    torch.set_num_threads(1)
    variant = VARIANTS[name]
    overrides, k, n = RESUME.get(name) or RESUME.get(variant.algorithm) or ([], 2, 4)
    cfg = load_config([*variant.config_overrides(), *overrides, *RESUME_COMMON])
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    assert run_serial(cfg, straight, stop_after_updates=n) is None
    assert run_serial(cfg, resumed, stop_after_updates=k) is None
    stopped = final_checkpoint(resumed)
    assert stopped["counters"]["updates"] >= k
    if variant.algorithm != "es":  # an ES chunk is whole episodes
        envs = [env for actor in stopped["extra"]["actors"] for env in actor["envs"]]
        assert any(e for env in envs for e in env["elapsed_steps"]), "mid-episode at the stop"
    if "queued_chunks" in stopped["feed"] and cfg.topology.actors > 1:
        assert stopped["feed"]["queued_chunks"], "chunks wait in the feed at the stop"
    if "samples" in stopped["feed"]:
        samples = stopped["feed"]["samples"]
        assert samples and any(0 < s["used"] < s["minibatches"] for s in samples), "a sample is half used"
    assert run_serial(cfg, resumed, resume=True, stop_after_updates=n) is None

    assert_resumed_as_straight(straight, resumed, n)
