"""The robosuite adapter (`env.id=robosuite:<Task>`): Gymnasium's checker, the documented observation layout,
the horizon as truncation, success in `info`, seeding, and config errors before anything starts.

Lift with one Panda throughout; building one takes a few seconds, so most tests share one module-wide env.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from surreal.algos import get_algorithm
from surreal.cli import main
from surreal.config import ConfigError, algo_config, load_config
from surreal.envs import check_env_id, env_steps_bound, make_env, make_vec_env
from surreal.envs_robosuite import RobosuiteEnv
from surreal.metricsfile import read_metrics
from surreal.policy.load import load_policy
from surreal.run.serial import SerialResumeError, run_serial
from surreal.runtime.rollout import RolloutCollector

LIFT = "robosuite:Lift"
HORIZON = 20


@pytest.fixture(scope="module")
def lift():
    env = RobosuiteEnv(LIFT, horizon=HORIZON)
    yield env
    env.close()


def test_the_adapter_passes_gymnasiums_environment_checker(lift):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(lift, skip_render_check=True)
    # The one warning left is Gymnasium's advice about infinite observation bounds, which MuJoCo's own
    # Gymnasium tasks get as well: robosuite's observations are unbounded.
    assert all("infinity" in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_observations_are_the_sorted_low_dim_vectors_as_float32(lift):
    assert lift.obs_keys == ["object-state", "robot0_proprio-state"]
    assert lift.observation_space.shape == (60,) and lift.observation_space.dtype == np.float32
    obs, info = lift.reset(seed=3)
    raw = lift._env._get_observations(force_update=True)
    expected = np.concatenate([raw["object-state"], raw["robot0_proprio-state"]]).astype(np.float32)
    assert obs.dtype == np.float32 and np.array_equal(obs, expected) and info == {}
    low, high = lift._env.action_spec
    assert lift.action_space.shape == (7,) and lift.action_space.dtype == np.float32
    assert np.array_equal(lift.action_space.low, low) and np.array_equal(lift.action_space.high, high)


def test_the_horizon_truncates_and_every_step_reports_success(lift):
    lift.reset(seed=1)
    for t in range(1, HORIZON + 1):
        _, reward, terminated, truncated, info = lift.step(np.zeros(7, np.float32))
        assert isinstance(reward, float) and not terminated, "robosuite tasks have no terminal states"
        assert truncated == (t == HORIZON), t
        assert info["is_success"] is False, "the cube lies on the table"


def test_a_lifted_cube_is_reported_as_success(lift):
    lift.reset(seed=2)
    sim, cube = lift._env.sim, lift._env.cube
    qpos = sim.data.get_joint_qpos(cube.joints[0]).copy()
    qpos[2] += 0.2  # well above the table: Lift's success is the cube 4 cm over it
    sim.data.set_joint_qpos(cube.joints[0], qpos)
    sim.forward()
    assert lift.step(np.zeros(7, np.float32))[4]["is_success"] is True


def test_a_seeded_reset_repeats_its_initial_state(lift):
    first, _ = lift.reset(seed=11)
    lift.step(lift.action_space.sample())
    again, _ = lift.reset(seed=11)
    other, _ = lift.reset(seed=12)
    assert np.array_equal(first, again) and not np.array_equal(first, other)


def test_actor_rollouts_count_one_success_per_episode():
    envs = make_vec_env(LIFT, num_envs=2, seed=0, env_kwargs={"horizon": 5})

    class Zero:
        def act(self, obs):
            return np.zeros((len(obs), 7), np.float32), {}

        def episode_done(self, done):
            pass

    chunk = RolloutCollector(envs, Zero(), chunk_steps=10, actor_index=0).collect(version=0)
    envs.close()
    assert chunk.episode_lengths == [5, 5, 5, 5]
    assert chunk.episode_successes == [False] * 4
    assert chunk.arrays["truncated"].sum() == 4 and not chunk.arrays["terminated"].any()


SERIAL_SIZES = {
    "ppo": ["algo.batch_size=64", "algo.minibatch_size=32", "algo.update_epochs=1"],
    "ddpg": ["algo.batch_size=64", "algo.learning_starts=128", "algo.hidden_sizes=[32,32]"],
}


@pytest.mark.parametrize("algo", sorted(SERIAL_SIZES))
@pytest.mark.system
def test_serial_mode_trains_on_lift_and_reports_success_rates(tmp_path, algo):
    """The same cores as the processes, in one process: one short run per family (FIFO chunks, sampled replay).
    robosuite's physics is not saved with the world, so its checkpoints hold the learner only and a serial
    resume says it cannot continue the run exactly."""
    cfg = load_config(
        [f"algo={algo}", f"env={LIFT}", "steps=512", "actors=1", "env.kwargs.horizon=16", "actor.chunk_steps=16"]
        + ["learner.eval_episodes=2", "device=cpu", *SERIAL_SIZES[algo]]
    )
    result = run_serial(cfg, tmp_path)
    assert result["env_steps"] >= 512 and result["eval_episodes"] == 2
    assert 0.0 <= result["eval_success_rate"] <= 1.0 and len(result["eval_successes"]) == 2
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows and all(0.0 <= row["train_success_rate"] <= 1.0 for row in rows if row["episodes"])
    # The run's policy artifact acts as the learner's policy, bit for bit, on the task's observations; `surreal eval`
    # scores it with success rates. (Its returns are not eval.json's to the last digit: a robosuite episode is not
    # repeatable, the same policy evaluated twice in one process scores differently in the third digit.)
    env = make_env(LIFT, seed=0, env_kwargs={"horizon": 16})
    obs = []
    for episode in range(3):  # 16-step episodes
        obs += [env.reset(seed=episode)[0]] + [env.step(env.action_space.sample())[0] for _ in range(15)]
    env.close()
    learner = get_algorithm(algo).make_learner(env.observation_space, env.action_space, algo_config(cfg), "cpu")
    newest = sorted((tmp_path / "checkpoints").glob("ckpt-*.pt"))[-1]
    learner.load_state_dict(torch.load(newest, map_location="cpu", weights_only=True)["learner"])
    reference = get_algorithm(algo).make_policy(env.observation_space, env.action_space, algo_config(cfg), 0, 1)
    reference.load_params(learner.params())
    assert np.array_equal(load_policy(tmp_path).act(np.array(obs)), reference.act_deterministic(np.array(obs)))
    assert main(["eval", str(tmp_path / "policy"), "--json", str(tmp_path / "replayed.json")]) == 0
    replayed = json.loads((tmp_path / "replayed.json").read_text())
    assert replayed["eval_episodes"] == 2 and len(replayed["eval_successes"]) == 2
    assert 0.0 <= replayed["eval_success_rate"] <= 1.0
    with pytest.raises(SerialResumeError, match="RobosuiteEnv: its physics cannot be saved"):
        run_serial(cfg, tmp_path, resume=True)


def test_rgb_array_frames_come_from_the_offscreen_front_camera_upright():
    env = RobosuiteEnv(LIFT, horizon=4, render_mode="rgb_array")
    try:
        env.reset(seed=0)
        first = env.render()
        env.step(np.ones(env.action_space.shape, np.float32))
        moved = env.render()
    finally:
        env.close()
    assert first.shape == (480, 480, 3) and first.dtype == np.uint8 and first.std() > 10
    assert np.abs(moved.astype(int) - first).mean() > 0, "the arm moved"
    # Upright: the floor (brown) at the bottom, the wall (grey, channels nearly equal) at the top.
    top, bottom = first[:40].reshape(-1, 3).mean(0), first[-40:].reshape(-1, 3).mean(0)
    assert np.ptp(top) < 10 and bottom[0] - bottom[2] > 20, (top, bottom)
    assert RobosuiteEnv.metadata["render_modes"] == ["rgb_array"] and RobosuiteEnv(LIFT, horizon=4).render() is None


@pytest.mark.system
def test_surreal_eval_records_a_lift_episode(tmp_path):
    """`surreal eval --video` on a robosuite task, as a user runs it (a fresh process picks the renderer before
    robosuite is imported): one MP4 of the episode, a frame per step and the reset's."""
    cfg = load_config(
        ["algo=ppo", f"env={LIFT}", "steps=32", "actors=1", "env.kwargs.horizon=8", "actor.chunk_steps=8"]
        + ["learner.eval_episodes=1", "device=cpu", "algo.batch_size=16", "algo.minibatch_size=16"]
    )
    run_serial(cfg, tmp_path / "run")
    videos = tmp_path / "videos"
    command = [sys.executable, "-m", "surreal", "eval", str(tmp_path / "run"), "--video", str(videos)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(p.name for p in videos.iterdir()) == ["env0-episode-1.mp4", "eval.json"]
    assert json.loads((videos / "eval.json").read_text())["videos"] == [str(videos / "env0-episode-1.mp4")]
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries"]
        + ["stream=nb_read_frames,width,height", "-of", "json", str(videos / "env0-episode-1.mp4")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    stream = json.loads(probe.stdout)["streams"][0]
    assert (int(stream["nb_read_frames"]), stream["width"], stream["height"]) == (9, 480, 480)


def test_the_horizon_bounds_the_env_steps_a_unit_may_claim():
    cfg = load_config(["env=robosuite:Lift", "algo=es", "env.kwargs.horizon=100"])
    assert env_steps_bound(cfg) == cfg.algo.max_env_steps_per_unit(100)
    env = make_env(LIFT, seed=0, env_kwargs={"horizon": 100})
    assert env.observation_space.shape == (60,)
    env.close()


def test_a_named_composite_controller_is_loaded_for_the_robot():
    env = RobosuiteEnv(LIFT, controller="BASIC", horizon=5)
    assert env.action_space.shape == (7,) and env.observation_space.shape == (60,)
    env.close()


@pytest.mark.parametrize(
    ("env_id", "kwargs", "says"),
    [
        ("robosuite:Lfit", {}, "did you mean 'robosuite:Lift'"),
        (LIFT, {"horzion": 100}, "env.kwargs.horzion is not a parameter of robosuite:Lift; did you mean horizon?"),
        (LIFT, {"seed": 3}, "env.kwargs.seed cannot be set"),
        (LIFT, {"ignore_done": True}, "never end an episode"),
        (LIFT, {"controller": "BASIC", "controller_configs": {}}, "not both"),
    ],
)
def test_a_bad_robosuite_id_or_kwarg_is_a_clear_config_error(env_id, kwargs, says):
    with pytest.raises(ConfigError) as caught:
        check_env_id(env_id, kwargs)
    assert says in str(caught.value)


def test_the_config_schema_refuses_a_typod_robosuite_kwarg():
    with pytest.raises(ConfigError, match="did you mean horizon"):
        load_config(["env=robosuite:Lift", "env.kwargs.horzion=100"])
    assert load_config(["env=robosuite:Lift", "env.kwargs.horizon=100"]).env.kwargs == {"horizon": 100}


def test_without_the_extra_a_robosuite_id_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "robosuite", None)  # what `import robosuite` meets where it is not installed
    with pytest.raises(ConfigError, match=r"pip install '\.\[robosuite\]' in a checkout"):
        check_env_id(LIFT)
