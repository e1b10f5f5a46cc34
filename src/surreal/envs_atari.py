"""Atari 2600 games (`env.id=ALE/<Game>-v5`, e.g. `ALE/Pong-v5`) through ale-py, with the standard preprocessing.

One env class, `AtariEnv`, so actors, serial mode, evaluation and the benchmarks step a game as they step any
Gymnasium id (`surreal.envs` dispatches on the `ALE/` prefix). ale-py (whose wheel ships the ROMs) and OpenCV are
the `atari` extra (`pip install 'surreal-rl[atari]'`), imported only when such an id is used.

What a step is (the preprocessing of Mnih et al. 2015, as Gymnasium's `AtariPreprocessing` and
`FrameStackObservation` do it, frame for frame: tests/test_atari.py steps both with the same seeds and actions):

- **frame skip**: an action is repeated for `frame_skip` (4) emulator frames and their rewards summed; the
  observation is the pixel-wise maximum of the last two frames (sprites that flicker between frames stay visible);
- **frames**: the ALE's grayscale screen (210x160) resized to `screen_size` x `screen_size` (84) with OpenCV's
  area interpolation, uint8;
- **observation**: the last `frame_stack` (4) frames, channels first: `Box(0, 255, (4, 84, 84), uint8)`. A reset's
  stack is its first frame repeated (FrameStackObservation's `padding_type="reset"`). An episode's final
  observation repeats its last frame when the game ends within a frame skip (the reference's way: no screen is
  read after the terminal frame); it is read only to bootstrap a truncation (the 108,000-frame cap);
- **no-op starts**: a reset plays 1 to `noop_max` (30) NOOP frames, drawn from the game's seeded generator;
- **action**: `Discrete(n)` over the game's minimal action set (its first action is NOOP).

Training envs and evaluation envs differ (`training=`, passed by whoever builds the env: `surreal.envs`):

- **reward clipping** (`clip_rewards`): a training env's reward is the sign of the frame-skipped reward (Mnih et
  al.'s clipping; `ClipReward(-1, 1)` on integer game rewards); an evaluation env's is the game's, so evaluation
  returns are game scores;
- **episodic life** (`episodic_life`): a training env reports `terminated` when a life is lost, as DQN trained,
  but, as DQN (and OpenAI Baselines, CleanRL, EnvPool) did, the game goes on: the reset that follows plays one
  frame-skipped NOOP step and starts the next "episode" from there, with the lives that are left. (Gymnasium's
  `terminal_on_life_loss` restarts the whole game instead, so an agent would only ever play its first life.)
  An evaluation env never ends an episode before the game is over.
- every step's `info` holds `unclipped_reward` (the game's reward) and `game_over` (the game, not only a life,
  ended), so a training rollout can still report game scores. With SAME_STEP autoreset a done step's info is in
  the vector env's `final_info`.

The presets (`env.kwargs.preset`), and why:

- **machado** (the default): Machado et al. 2018 ("Revisiting the Arcade Learning Environment"), as the ALE's v5
  envs encode them: sticky actions with probability 0.25 (`repeat_action_probability`: at every emulator frame the
  previous action is repeated with that probability, the stochasticity they recommend over no-op starts alone), no
  loss-of-life signal (they recommend the game-over signal only), episodes capped at 108,000 frames (30 minutes).
  The action set is the minimal one, the v5 envs' default and CleanRL's and EnvPool's, although Machado et al.'s own
  benchmarks used all 18 actions (`env.kwargs.full_action_space=true` for that). No-op starts are kept (Gymnasium's
  wrapper's default; with sticky actions they only vary the first frames further).
- **dqn**: Mnih et al. 2015's settings, what CleanRL's `ppo_atari.py` trains with (on the `NoFrameskip-v4` ids):
  no sticky actions, episodic life in training, up to 30 no-op starts. CleanRL also presses FIRE at every reset
  (`FireResetEnv`); neither preset does, the agent learns to.

Both presets clip rewards in training and stack 4 frames of 84x84 at a frame skip of 4 with max-pooling; every field
can be overridden in `env.kwargs` (`env.kwargs.preset=dqn env.kwargs.noop_max=0`), and the ALE's own parameters
(`mode`, `difficulty`, `repeat_action_probability`, `full_action_space`, `max_num_frames_per_episode`) go to it.
Env steps are agent steps: one is `frame_skip` emulator frames (frames/s = 4 x steps/s).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass, fields, replace
from types import ModuleType
from typing import Any, cast

import gymnasium as gym
import numpy as np

from surreal.errors import ConfigError

PREFIX = "ALE/"
INSTALL = "pip install 'surreal-rl[atari]'"


@dataclass(frozen=True)
class AtariPreset:
    """The preprocessing and the ALE settings of one preset (module docstring: what each field does)."""

    repeat_action_probability: float
    full_action_space: bool
    max_num_frames_per_episode: int
    noop_max: int
    frame_skip: int
    screen_size: int
    frame_stack: int
    episodic_life: bool  # training envs only
    clip_rewards: bool  # training envs only


MACHADO = AtariPreset(
    repeat_action_probability=0.25,
    full_action_space=False,
    max_num_frames_per_episode=108_000,
    noop_max=30,
    frame_skip=4,
    screen_size=84,
    frame_stack=4,
    episodic_life=False,
    clip_rewards=True,
)
PRESETS: dict[str, AtariPreset] = {  # "dqn" differs from "machado" in these two fields only
    "machado": MACHADO,
    "dqn": replace(MACHADO, repeat_action_probability=0.0, episodic_life=True),
}
DEFAULT_PRESET = "machado"
PRESET_FIELDS = {f.name for f in fields(AtariPreset)}
ALE_FIELDS = {"repeat_action_probability", "full_action_space", "max_num_frames_per_episode"}  # go to the ALE env
ALE_KWARGS = {"mode", "difficulty", "render_mode"}  # the ALE env's, not part of a preset
RESERVED_KWARGS = {
    "frameskip": "the preset skips frames (and max-pools the last two): set env.kwargs.frame_skip",
    "obs_type": "observations are the preset's stacked grayscale frames",
    "continuous": "actions are the game's discrete ones",
    "sound_obs": "observations are the preset's stacked grayscale frames",
    "game": "it is the game in env.id",
    "seed": "the experiment's seed seeds each env",
}
INT_FIELDS = {"max_num_frames_per_episode": 1, "noop_max": 0, "frame_skip": 1, "screen_size": 8, "frame_stack": 1}


def is_atari_id(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def import_ale() -> ModuleType:
    """ale_py, imported (which registers the `ALE/` ids with Gymnasium); ConfigError with the install line when the
    extra is missing. The emulator's banner on stderr is turned off: its warnings and errors still print, and a
    refusal at start stays one line."""
    try:
        import ale_py
        import cv2  # noqa: F401  - the frames' resize
    except ImportError as exc:
        raise ConfigError(f"Atari games need the extra: {INSTALL} ({exc})") from None
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    return ale_py


def preset(env_kwargs: dict[str, Any] | None) -> AtariPreset:
    """The preset `env.kwargs` names (default machado) with the fields `env.kwargs` overrides; ConfigError, one line,
    for an unknown preset name or a value of the wrong type or range."""
    kwargs = env_kwargs or {}
    name = kwargs.get("preset", DEFAULT_PRESET)
    if name not in PRESETS:
        raise ConfigError(f"env.kwargs.preset={name!r} is not an Atari preset (presets: {', '.join(sorted(PRESETS))})")
    chosen = PRESETS[name]
    overrides: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key not in PRESET_FIELDS:
            continue
        default = getattr(chosen, key)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"env.kwargs.{key}={value!r} must be true or false")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < INT_FIELDS[key]:
                raise ConfigError(f"env.kwargs.{key}={value!r} must be an integer >= {INT_FIELDS[key]}")
        elif isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
            raise ConfigError(f"env.kwargs.{key}={value!r} must be a probability in [0, 1)")
        overrides[key] = value
    return replace(chosen, **overrides)


def check(env_id: str, env_kwargs: dict[str, Any] | None) -> None:
    """Raise ConfigError, one line, unless `env_id` is an ALE game (nearest ids suggested) and every
    `env.kwargs` key is a preset field, `preset`, or one of the ALE's own parameters, before any process starts."""
    import_ale()
    if env_id not in gym.registry:
        ale_ids = [k for k in gym.registry if is_atari_id(k)]
        near = difflib.get_close_matches(env_id, ale_ids, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
        raise ConfigError(f"env.id={env_id!r} is not an ALE game{hint}")
    accepted = PRESET_FIELDS | ALE_KWARGS | {"preset"}
    problems = []
    for key in env_kwargs or {}:
        if key in RESERVED_KWARGS:
            problems.append(f"env.kwargs.{key} cannot be set: {RESERVED_KWARGS[key]}")
        elif key not in accepted:
            near = difflib.get_close_matches(key, sorted(accepted), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            problems.append(f"env.kwargs.{key} is not a setting of {env_id}{hint}")
    if problems:
        raise ConfigError("; ".join(problems))
    preset(env_kwargs)


def max_episode_steps(env_kwargs: dict[str, Any] | None) -> int:
    """The most env (agent) steps one episode can take: the frame cap over the frame skip, rounded up."""
    chosen = preset(env_kwargs)
    return math.ceil(chosen.max_num_frames_per_episode / chosen.frame_skip)


class AtariEnv(gym.Env[np.ndarray, np.int64]):
    """One ALE game with the preset's preprocessing (module docstring). `training`: clip rewards and end episodes at
    a lost life where the preset says so; False for evaluation (game scores, whole games).

    The emulator is driven directly (`ale.act`, the grayscale screen read into two buffers) rather than through a
    chain of Gymnasium wrappers that each step a frame and copy its RGB screen: the same frames, faster
    (bench/atari_envs.py measures both; what is left over raw emulation is mostly the resize)."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 15}  # 60 Hz over a frame skip of 4

    def __init__(self, env_id: str, training: bool = True, **env_kwargs: Any) -> None:
        check(env_id, env_kwargs)
        self.env_id = env_id
        self.training = training
        self.preset = preset(env_kwargs)
        settings = asdict(self.preset)
        ale_kwargs = {k: env_kwargs[k] for k in ALE_KWARGS if k in env_kwargs}
        ale_kwargs.update({k: settings[k] for k in ALE_FIELDS})
        self._game = cast(Any, gym.make(env_id, frameskip=1, obs_type="grayscale", **ale_kwargs).unwrapped)  # ale_py
        self.render_mode = self._game.render_mode
        self._ale = self._game.ale
        self._actions = self._game._action_set
        if self.preset.noop_max > 0 and self._game.get_action_meanings()[0] != "NOOP":
            raise ConfigError(f"env.kwargs.noop_max={self.preset.noop_max}: {env_id}'s first action is not NOOP")
        self._episodic_life = training and self.preset.episodic_life
        self._clip_rewards = training and self.preset.clip_rewards
        height, width = self._ale.getScreenDims()
        self._screens = np.zeros((2, height, width), np.uint8)  # the last two frames of a skip, max-pooled
        size, depth = self.preset.screen_size, self.preset.frame_stack
        self._stack = np.zeros((depth, size, size), np.uint8)
        self._lives = 0
        self._life_lost = False  # the last step ended a life but not the game: the next reset plays on
        self.observation_space = gym.spaces.Box(0, 255, (depth, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(len(self._actions))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        life_lost, self._life_lost = self._life_lost, False
        if life_lost and seed is None and options is None and self._play_on():
            return self._stack.copy(), self._info()
        self._game.reset(seed=seed, options=options)
        noops = int(self._game.np_random.integers(1, self.preset.noop_max + 1)) if self.preset.noop_max > 0 else 0
        for _ in range(noops):
            self._ale.act(self._actions[0])
            if self._ale.game_over(with_truncation=True):
                self._game.reset(seed=seed, options=options)
        self._lives = self._ale.lives()
        self._ale.getScreenGrayscale(self._screens[0])
        self._screens[1].fill(0)
        self._stack[:] = self._frame()
        return self._stack.copy(), self._info()

    def _play_on(self) -> bool:
        """After a lost life (episodic life): one NOOP step, whose frame starts the next episode's stack; False if
        that step ended the game (a full reset follows)."""
        _, terminated, truncated = self._skip(0)
        if terminated or truncated:
            return False
        self._stack[:] = self._frame()
        return True

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, terminated, truncated = self._skip(action)
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = self._frame()
        game_over = self._ale.game_over(with_truncation=True)
        self._life_lost = terminated and not game_over
        info = self._info()
        info["unclipped_reward"], info["game_over"] = reward, game_over
        return self._stack.copy(), float(np.sign(reward)) if self._clip_rewards else reward, terminated, truncated, info

    def _skip(self, action: Any) -> tuple[float, bool, bool]:
        """`frame_skip` emulator frames of `action`: the summed reward, and whether the game (or, with episodic life,
        a life) ended or the frame cap truncated it. The last two frames' screens are read unless it ended first."""
        ale, screens, skip = self._ale, self._screens, self.preset.frame_skip
        ale_action = self._actions[action]
        reward, terminated, truncated = 0.0, False, False
        for t in range(skip):
            reward += ale.act(ale_action)
            terminated, truncated = ale.game_over(with_truncation=False), ale.game_truncated()
            if self._episodic_life:
                lives = ale.lives()
                terminated = terminated or lives < self._lives
                self._lives = lives
            if terminated or truncated:
                break
            if t == skip - 2:
                ale.getScreenGrayscale(screens[1])
            elif t == skip - 1:
                ale.getScreenGrayscale(screens[0])
        return reward, terminated, truncated

    def _frame(self) -> np.ndarray:
        import cv2

        if self.preset.frame_skip > 1:
            np.maximum(self._screens[0], self._screens[1], out=self._screens[0])
        size = self.preset.screen_size
        return cv2.resize(self._screens[0], (size, size), interpolation=cv2.INTER_AREA)

    def _info(self) -> dict[str, Any]:
        return {"lives": self._ale.lives(), "episode_frame_number": self._ale.getEpisodeFrameNumber()}

    def render(self) -> Any:
        return self._game.render()

    def close(self) -> None:
        self._game.close()
