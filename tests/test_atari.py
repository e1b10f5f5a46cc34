"""Atari games through ale-py (src/surreal/envs_atari.py): the preprocessing is Gymnasium's reference wrappers'
frame for frame, the stacks are right across episode ends, and training envs differ from evaluation envs only in
reward clipping and episodic life."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ale_py", reason="the atari extra")
pytest.importorskip("cv2", reason="the atari extra")

from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation  # noqa: E402

from surreal.config import ConfigError, load_config  # noqa: E402
from surreal.envs import check_env_id, env_steps_bound, make_env, make_vec_env  # noqa: E402
from surreal.envs_atari import AtariEnv, max_episode_steps  # noqa: E402

PONG, BREAKOUT, INVADERS = "ALE/Pong-v5", "ALE/Breakout-v5", "ALE/SpaceInvaders-v5"


def reference(env_id: str, *, sticky: float = 0.25, life_loss: bool = False, clip: bool = False, **ale: int) -> gym.Env:
    """Gymnasium's own pipeline: the ALE env stepping single frames, AtariPreprocessing, (ClipReward), and
    FrameStackObservation of 4 (padded with the reset frame)."""
    env: gym.Env = gym.make(env_id, frameskip=1, repeat_action_probability=sticky, **ale)
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=life_loss)
    if clip:
        env = ClipReward(env, -1.0, 1.0)
    return FrameStackObservation(env, 4)


def actions(n: int, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, steps)


@pytest.mark.parametrize(("env_id", "cap"), [(PONG, 2_000), (BREAKOUT, 108_000)])
def test_evaluation_envs_step_as_the_reference_wrappers_frame_for_frame_across_episode_ends(env_id, cap):
    """Two envs each, through the vector env an actor steps (SAME_STEP autoreset): every observation, final
    observation, reward and flag equal. Pong's frame cap of 2,000 makes its episodes end by truncation (500 steps);
    Breakout's random play ends games by termination."""
    ours = make_vec_env(env_id, 2, seed=11, env_kwargs={"max_num_frames_per_episode": cap}, training=False)
    ref = gym.vector.SyncVectorEnv(
        [lambda: reference(env_id, max_num_frames_per_episode=cap) for _ in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs, _ = ours.reset(seed=[11, 12])
    ref_obs, _ = ref.reset(seed=[11, 12])
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, ref_obs)
    ends = {"terminated": 0, "truncated": 0}
    for step, action in enumerate(actions(ours.single_action_space.n, 1_200).reshape(-1, 1).repeat(2, 1)):
        obs, rewards, terminated, truncated, infos = ours.step(action)
        ref_obs, ref_rewards, ref_terminated, ref_truncated, ref_infos = ref.step(action)
        np.testing.assert_array_equal(obs, ref_obs, err_msg=f"step {step}")
        np.testing.assert_array_equal(rewards, ref_rewards)
        np.testing.assert_array_equal(terminated, ref_terminated)
        np.testing.assert_array_equal(truncated, ref_truncated)
        for i in np.flatnonzero(terminated | truncated):
            np.testing.assert_array_equal(infos["final_obs"][i], ref_infos["final_obs"][i])
            first = obs[i]  # the next episode's first stack: its first frame four times
            assert all(np.array_equal(first[k], first[-1]) for k in range(4))
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int(truncated.sum())
    assert sum(ends.values()) >= 2, f"no episode ended in 1,200 steps: {ends}"
    assert ends["truncated" if cap < 108_000 else "terminated"] >= 2, ends


def test_training_envs_clip_rewards_as_the_reference_does_and_evaluation_envs_keep_game_scores():
    """Space Invaders scores 5 to 30 points an alien: with the same seeds and actions a training env's frames are
    the evaluation env's, its rewards their sign (ClipReward(-1, 1) on the reference), and `unclipped_reward` the
    game's reward."""
    no_life = {"episodic_life": False}
    train = make_env(INVADERS, 5, no_life, training=True)
    evaluate = make_env(INVADERS, 5, no_life, training=False)
    ref = reference(INVADERS, clip=True)
    ref.reset(seed=5)
    big = 0
    for action in actions(6, 400, seed=1):
        t_obs, t_reward, t_term, t_trunc, t_info = train.step(action)
        e_obs, e_reward, e_term, e_trunc, _ = evaluate.step(action)
        r_obs, r_reward, *_ = ref.step(action)
        np.testing.assert_array_equal(t_obs, e_obs)
        np.testing.assert_array_equal(t_obs, r_obs)
        assert t_reward == r_reward == np.sign(e_reward) and t_info["unclipped_reward"] == e_reward
        big += e_reward > 1
        assert not (t_term or t_trunc or e_term or e_trunc)
    assert big >= 3, "the evaluation env's rewards are game points"


def test_a_training_env_ends_an_episode_at_a_lost_life_as_the_reference_then_plays_on_from_that_game():
    """The dqn preset in Breakout: up to and including the step that loses the first life, a training env is
    Gymnasium's `terminal_on_life_loss` pipeline frame for frame (clipped rewards, `terminated` at the lost life).
    Then, unlike the reference (which restarts the game), its reset plays on: the new episode's first stack is the
    frame the reference shows after one NOOP step from the same emulator state, with one life fewer."""
    train = AtariEnv(BREAKOUT, training=True, preset="dqn")
    ref = reference(BREAKOUT, sticky=0.0, life_loss=True, clip=True)
    train.reset(seed=3)
    ref.reset(seed=3)
    for step, action in enumerate(actions(4, 2_000, seed=2)):
        obs, reward, terminated, truncated, info = train.step(action)
        r_obs, r_reward, r_terminated, r_truncated, _ = ref.step(action)
        np.testing.assert_array_equal(obs, r_obs, err_msg=f"step {step}")
        assert (reward, terminated, truncated) == (r_reward, r_terminated, r_truncated)
        if terminated:
            break
    else:
        pytest.fail("no life lost in 2,000 steps")
    assert info["lives"] == 4 and not info["game_over"]
    frames_before = info["episode_frame_number"]
    # The reference, put in the same emulator state, takes the NOOP step the training env's reset takes.
    ref_ale = ref.unwrapped.ale  # type: ignore[attr-defined]
    ref_ale.restoreState(train._ale.cloneState(include_rng=True))
    noop_obs, *_ = ref.step(0)
    first, reset_info = train.reset()
    for k in range(4):
        np.testing.assert_array_equal(first[k], noop_obs[-1])
    assert reset_info["lives"] == 4 and reset_info["episode_frame_number"] == frames_before + 4, "the same game"


def test_a_training_game_runs_to_game_over_through_its_lives_and_then_restarts():
    train = make_vec_env(BREAKOUT, 1, seed=7, env_kwargs={"preset": "dqn"}, training=True)
    lost, lives = 0, []
    for action in actions(4, 5_000, seed=4):
        _, _, terminated, truncated, infos = train.step(np.array([action]))
        if terminated[0] or truncated[0]:
            final = infos["final_info"]
            lives.append(int(final["lives"][0]))
            if final["game_over"][0]:
                break
            lost += 1
    else:
        pytest.fail("no game over in 5,000 steps")
    assert lost == 4 and lives == [4, 3, 2, 1, 0], lives
    assert infos["lives"][0] == 5, "a new game after the game over"
    evaluate = make_vec_env(BREAKOUT, 1, seed=7, env_kwargs={"preset": "dqn"}, training=False)
    for action in actions(4, 5_000, seed=4):
        _, _, terminated, truncated, infos = evaluate.step(np.array([action]))
        if terminated[0] or truncated[0]:
            assert infos["final_info"]["lives"][0] == 0, "an evaluation episode is a whole game"
            break


def test_presets_and_their_settings():
    machado = AtariEnv(PONG)
    assert machado.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert machado.action_space == gym.spaces.Discrete(6)
    assert machado._game.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert not machado._episodic_life and machado._clip_rewards
    dqn = AtariEnv(BREAKOUT, preset="dqn", training=False)
    assert dqn._game.ale.getFloat("repeat_action_probability") == 0.0
    assert not dqn._episodic_life and not dqn._clip_rewards, "an evaluation env neither clips nor ends at a life"
    small = AtariEnv(PONG, frame_stack=2, screen_size=64, full_action_space=True)
    assert small.observation_space.shape == (2, 64, 64) and small.action_space == gym.spaces.Discrete(18)
    assert max_episode_steps({}) == 27_000 and max_episode_steps({"frame_skip": 5}) == 21_600
    es = load_config(["env=ALE/Pong-v5", "algo=es"])
    assert env_steps_bound(es) == es.algo.max_env_steps_per_unit(27_000)


@pytest.mark.parametrize(
    ("env_id", "kwargs", "says"),
    [
        ("ALE/Pnog-v5", {}, "is not an ALE game; did you mean 'ALE/Pong-v5'"),
        (PONG, {"obs_type": "ram"}, "env.kwargs.obs_type cannot be set: observations are the preset's stacked"),
        (PONG, {"frameskip": 4}, "env.kwargs.frameskip cannot be set: the preset skips frames"),
        (PONG, {"noop_mx": 4}, "env.kwargs.noop_mx is not a setting of ALE/Pong-v5; did you mean noop_max?"),
        (PONG, {"preset": "nature"}, "env.kwargs.preset='nature' is not an Atari preset (presets: dqn, machado)"),
        (PONG, {"episodic_life": 1}, "env.kwargs.episodic_life=1 must be true or false"),
        (PONG, {"frame_skip": 0}, "env.kwargs.frame_skip=0 must be an integer >= 1"),
        (PONG, {"repeat_action_probability": 1.5}, "must be a probability in [0, 1)"),
    ],
)
def test_bad_ids_and_kwargs_are_one_line(env_id, kwargs, says):
    with pytest.raises(ConfigError) as err:
        check_env_id(env_id, kwargs)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_ppo_takes_atari_frames_and_every_other_algorithm_refuses_them_in_one_line():
    """PPO and SAC declare the image kind (a convolutional encoder); DDPG and ES are MLPs on flat vectors, and SAC,
    which takes images, is refused Pong's discrete actions instead."""
    from surreal.config.schema import ALGORITHMS
    from surreal.run.preflight import preflight

    assert preflight(load_config(["algo=ppo", "env=ALE/Pong-v5"])) == []
    assert sorted(name for name in ALGORITHMS if name != "ppo") == ["ddpg", "es", "sac"]
    expected = {
        "ddpg": "algo=ddpg takes flat Box observations; ALE/Pong-v5's observations are Box(4, 84, 84) uint8 images; "
        "ppo and sac take them",
        "es": "algo=es takes flat Box observations; ALE/Pong-v5's observations are Box(4, 84, 84) uint8 images; "
        "ppo and sac take them",
        "sac": "algo=sac takes flat Box actions; ALE/Pong-v5's actions are Discrete(6); es and ppo take them",
    }
    for name, line in expected.items():
        with pytest.raises(ConfigError) as err:
            preflight(load_config([f"algo={name}", "env=ALE/Pong-v5"]))
        assert str(err.value) == line


def test_a_chunk_of_frames_too_large_for_a_replay_message_is_refused_in_one_line():
    """A chunk of frames is priced at the most it can hold, every step's two stacks whole (what each frame once
    stores when every step ends an episode): 256 steps of 4 envs are 57.8 MB of frames, under the default 64 MiB;
    5 envs are over it, and refused before anything starts."""
    from surreal.run.preflight import check_chunk_size

    env = AtariEnv(PONG)
    spaces = env.observation_space, env.action_space
    check_chunk_size(load_config(["env=ALE/Pong-v5", "topology.envs_per_actor=4"]), *spaces)
    with pytest.raises(ConfigError) as err:
        check_chunk_size(load_config(["env=ALE/Pong-v5", "topology.envs_per_actor=5"]), *spaces)
    line = str(err.value)
    assert "\n" not in line and line.startswith(
        "one chunk of actor.chunk_steps=256 x topology.envs_per_actor=5 steps of ALE/Pong-v5 (observations Box(4, 84, "
        "84) uint8 images, sent as each frame once, at most every step's stacks whole) can be "
    ), line
    assert line.endswith("more than replay.max_message_bytes=67,108,864; lower actor.chunk_steps or "
                         "topology.envs_per_actor, or raise replay.max_message_bytes"), line  # fmt: skip


def test_the_env_passes_gymnasiums_environment_checker():
    from gymnasium.utils.env_checker import check_env

    check_env(AtariEnv(PONG, render_mode="rgb_array"))


class AlwaysFire:
    """Space Invaders' FIRE (action 1) at every step: aliens die, points are scored, lives are lost."""

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return np.ones(len(obs), np.int64)


def test_evaluation_scores_whole_games_in_game_points():
    """`evaluate` (the learner's final evaluation, the evaluator, `surreal eval`) builds evaluation envs: with the
    dqn preset a training env would end the episode at the first lost life and clip every reward to 1."""
    from surreal.runtime.rollout import evaluate

    kwargs = {"preset": "dqn", "max_num_frames_per_episode": 4_000}
    (score,) = evaluate(INVADERS, AlwaysFire(), episodes=1, seed=2, env_kwargs=kwargs).returns
    game = make_env(INVADERS, 2, kwargs, training=False)
    rewards, lives = [], []
    while True:
        _, reward, terminated, truncated, info = game.step(1)
        rewards.append(reward)
        lives.append(info["lives"])
        if terminated or truncated:
            break
    assert score == sum(rewards) and max(rewards) > 1, "game points, not clipped ones"
    assert lives[0] > lives[-1], "the evaluated episode went on past a lost life"


def test_a_bad_atari_setting_is_a_config_problem_in_every_roles_config_check():
    with pytest.raises(ConfigError, match="env.kwargs.noop_mx is not a setting of ALE/Pong-v5; did you mean noop_max"):
        load_config(["env=ALE/Pong-v5", "env.kwargs.noop_mx=3"])
    assert load_config(["env=ALE/Pong-v5", "env.kwargs.preset=dqn"]).env.kwargs == {"preset": "dqn"}
