"""`surreal eval` and `surreal export`: what to do with a trained policy (docs/policies.md).

    surreal eval runs/my-run                                   the run's final evaluation again (its seed, its episodes)
    surreal eval runs/my-run/policy/best --episodes 20 --seed 7
    surreal eval runs/my-run --video videos/                   MP4s of the episodes (offscreen MuJoCo: EGL or OSMesa)
    surreal export runs/my-run --format onnx                   runs/my-run/policy/policy.onnx (+ .json)

`surreal eval` rolls the policy out with `surreal.runtime.rollout.evaluate`, the function the learner's final
evaluation and the evaluator use, on the same seeds: `--seed S` is an experiment seed, and the episodes start from
S + 1,000,003 as the learner's do (roles/evaluation.py), so `surreal eval RUN` with the run's seed and episode count
(the defaults) replays eval.json's episodes. Bad input (a path that holds no policy, a damaged or hostile file, an
env whose spaces do not fit, no renderer for --video) is one line on stderr and exit status 2. A policy or run folder
naming a `module:Name` env id is refused unless that module is named with `--import MODULE` (or `--env` names the
id): reading a file never chooses code to run.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2


class EvalError(Exception):
    """Why `surreal eval` or `surreal export` cannot go on: one line, exit status 2."""


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="a run folder, a policy folder or file, or a checkpoint")
    parser.add_argument("--episodes", type=int, help="episodes to run (default: the run's final evaluation's count)")
    parser.add_argument(
        "--seed", type=int, help="experiment seed: episodes start from seed + 1,000,003 as the run's did (default: its)"
    )
    parser.add_argument("--env", help="Gymnasium id to roll out in (default: the one it was trained on)")
    add_import_argument(parser)
    parser.add_argument("--stochastic", action="store_true", help="sample actions as the actors do")
    parser.add_argument("--video", metavar="DIR", help="record each episode as an MP4 in DIR (Gymnasium RecordVideo)")
    parser.add_argument(
        "--json", metavar="FILE", help="where to write the result (default: eval.json beside the policy)"
    )


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="a run folder, a policy folder or file, or a checkpoint")
    parser.add_argument("--format", required=True, choices=("onnx", "torchscript"))
    parser.add_argument("--out", help="output file (default: policy.onnx or policy.pt beside the policy file)")
    add_import_argument(parser)


def add_import_argument(parser: argparse.ArgumentParser) -> None:
    """`--import MODULE` (repeatable): a module to import first, whose envs a file's `MODULE:Name` env id may then
    use; a file never chooses a module to import (surreal/envs.py `admit_env_id`)."""
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (your envs' module): a policy or run folder naming a MODULE:Name env id is refused "
        "without it; repeatable",
    )


def choose_renderer() -> str:
    """Set MUJOCO_GL to an offscreen backend that starts on this machine (surreal/renderer.py); EvalError naming
    what each said when none starts."""
    from surreal.renderer import RendererUnavailable
    from surreal.renderer import choose_renderer as choose

    try:
        return choose("--video")
    except RendererUnavailable as exc:
        raise EvalError(str(exc)) from None


def video_wrapper(folder: Path) -> Any:
    """`evaluate`'s env wrapper that records env i's counted episodes as `env<i>-episode-<k>.mp4` (k from 1) in
    `folder`. RecordVideo numbers episodes by resets: `make_vec_env` resets each env once as it builds it and
    `evaluate` again with the evaluation's seeds, so the evaluation's episodes are 1 to its quota (episode 0 is
    the single frame between the two resets, not recorded); the episode after the quota, which the vector env
    starts by itself and the evaluation does not count, is not recorded either."""
    from gymnasium.wrappers import RecordVideo

    software = os.environ.get("MUJOCO_GL") == "osmesa"

    def wrap(env: Any, index: int, episodes: int) -> Any:
        model = getattr(env.unwrapped, "model", None)
        if software and model is not None:
            # CPU rasterizing: MuJoCo's 4096-pixel shadow map and 4x multisampling cost a HalfCheetah frame about
            # 450 ms on the shared 2-core box, a 1024 map and no multisampling about 70 ms. Frames only: the
            # physics never reads these.
            model.vis.quality.shadowsize, model.vis.quality.offsamples = 1024, 0
        return RecordVideo(
            env,
            str(folder),
            episode_trigger=lambda episode: 1 <= episode <= episodes,
            name_prefix=f"env{index}",
            disable_logger=True,
        )

    return wrap


def video_files(folder: Path, episodes: int) -> list[Path]:
    """The files `video_wrapper` writes for an evaluation of `episodes`, in episode order."""
    from surreal.runtime.rollout import eval_quotas

    quotas = eval_quotas(episodes)
    return [
        folder / f"env{i}-episode-{k}.mp4" for k in range(1, max(quotas) + 1) for i, q in enumerate(quotas) if k <= q
    ]


def _fits(policy: Any, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """The env's spaces are the policy's (shapes; and the action bounds where they would be clipped to)."""
    from surreal.envs import make_env

    try:
        env = make_env(env_id, 0, env_kwargs)
    except Exception as exc:  # gym.make raises many types for an unknown id or bad kwargs
        raise EvalError(f"cannot make env {env_id!r}: {exc}") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    if obs_space.shape != policy.observation_space.shape or act_space.shape != policy.action_space.shape:
        raise EvalError(
            f"{env_id} has observations {obs_space.shape} and actions {act_space.shape}; the policy takes "
            f"{policy.observation_space.shape} and gives {policy.action_space.shape}"
        )


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    """The evaluation `surreal eval` runs and prints; returns what it writes as JSON."""
    from surreal.envs_robosuite import is_robosuite_id

    if args.episodes is not None and args.episodes < 1:
        raise EvalError(f"--episodes must be >= 1 (got {args.episodes})")
    if args.video:
        choose_renderer()  # before anything imports MuJoCo: its backend is fixed at import
    from surreal.config import ConfigError
    from surreal.envs import admit_env_id, import_modules, modules_named
    from surreal.policy.load import Policy, read_policy

    try:
        import_modules([*args.imports, *modules_named([args.env])])  # what the user named: --import, --env's module
    except ConfigError as exc:
        raise EvalError(str(exc)) from None
    header, tensors, source = read_policy(args.policy)
    env_id = args.env or header["env"]["id"]
    try:
        admit_env_id(env_id, source)  # the policy's own id: made only if it imports nothing unnamed
    except ConfigError as exc:
        raise EvalError(str(exc)) from None
    import torch

    from surreal.roles.evaluation import EVAL_SEED_OFFSET
    from surreal.runtime.rollout import evaluate

    torch.set_num_threads(1)  # as the learner's final evaluation and the evaluator act: the same kernels, same numbers
    policy = Policy(header, tensors, source)
    env_kwargs = policy.env_kwargs if env_id == policy.env_id else {}
    recorded = header["evaluation"]
    episodes = args.episodes or (recorded["episodes"] if recorded else 10)
    seed = header["seed"] if args.seed is None else args.seed
    wrap = None
    if args.video:
        if is_robosuite_id(env_id):
            raise EvalError("--video: robosuite tasks are not recorded yet (their adapter renders no frames)")
        env_kwargs = {**env_kwargs, "render_mode": "rgb_array"}
        video_dir = Path(args.video)
        video_dir.mkdir(parents=True, exist_ok=True)
        wrap = video_wrapper(video_dir)
    _fits(policy, env_id, {k: v for k, v in env_kwargs.items() if k != "render_mode"})
    actor = policy.stochastic() if args.stochastic else policy
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos")  # each file is this evaluation's
        evaluation = evaluate(env_id, actor, episodes, seed + EVAL_SEED_OFFSET, env_kwargs, wrap=wrap)
    result = evaluation.report(
        policy=policy.source,
        env=env_id,
        seed=seed,
        first_episode_seed=seed + EVAL_SEED_OFFSET,
        deterministic=not args.stochastic,
        policy_env_steps=header["env_steps"],
    )
    if args.video:
        videos = video_files(Path(args.video), episodes)
        missing = [p.name for p in videos if not p.is_file()]
        if missing:
            raise EvalError(f"--video: RecordVideo did not write {', '.join(missing)}")
        result["videos"] = [str(p) for p in videos]
    return result


def one_line(exc: BaseException) -> str:
    """An error's text as the one line the command prints (an env's own message can span several)."""
    return " ".join(str(exc).split())


def eval_main(args: argparse.Namespace) -> int:
    from surreal.launch.runfolder import write_json
    from surreal.policy.artifact import ArtifactError

    try:
        result = run_eval(args)
    except (EvalError, ArtifactError) as exc:  # PolicyError is an ArtifactError
        print(f"surreal eval: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    success = f", success {result['eval_success_rate']:.0%}" if "eval_success_rate" in result else ""
    mode = "stochastic" if args.stochastic else "deterministic"
    print(
        f"{result['env']}: return {result['eval_return_mean']:.1f} ± {result['eval_return_std']:.1f} over "
        f"{result['eval_episodes']} {mode} episodes (seed {result['seed']}){success}"
    )
    out = Path(args.json) if args.json else Path(result["policy"]).with_name("eval.json")
    write_json(out, result)
    print(f"wrote {out}" + (f" and {len(result['videos'])} videos in {args.video}" if args.video else ""))
    return 0


def export_main(args: argparse.Namespace) -> int:
    from surreal.policy.artifact import ArtifactError
    from surreal.policy.export import ExportError, export
    from surreal.policy.load import load_policy

    try:
        path, info = export(load_policy(args.policy, args.imports), args.format, args.out)
    except (ExportError, ArtifactError) as exc:
        print(f"surreal export: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    inp, out = info["input"], info["output"]
    print(f"wrote {path} ({args.format}) and {path.name}.json")
    print(f"  input  {inp['name']}: {inp['dtype']}{inp['shape']}")
    folded = ", the observation normalizer folded in" if info["normalizer_folded_in"] else ""
    print(f"  output {out['name']}: {out['dtype']}{out['shape']} (deterministic actions{folded})")
    if "state_input" in info:  # a recurrent policy
        state_in, state_out = info["state_input"], info["state_output"]
        print(f"  input  {state_in['name']}: {state_in['dtype']}{state_in['shape']} (zeros at an episode's start)")
        print(f"  output {state_out['name']}: {state_out['dtype']}{state_out['shape']} (the next step's state)")
    return 0
