"""`surreal eval` and `surreal export`: what to do with a trained policy (docs/policies.md).

    surreal eval runs/my-run                                   the run's final evaluation again (its seed, its episodes)
    surreal eval runs/my-run/policy/best --episodes 20 --seed 7
    surreal eval runs/my-run --video videos/                   MP4s of the episodes, their eval.json (commands/video.py)
    surreal export runs/my-run --format onnx                   runs/my-run/policy/policy.onnx (+ .json)

`surreal eval` rolls the policy out with `surreal.runtime.rollout.evaluate`, the function the learner's final
evaluation and the evaluator use, on the same seeds: `--seed S` is an experiment seed, and the episodes start from
S + 1,000,003 as the learner's do (roles/evaluation.py), so `surreal eval RUN` with the run's seed and episode count
(the defaults) replays eval.json's episodes. Bad input (a path that holds no policy, a damaged or hostile file, an
env whose spaces do not fit, what --video needs and lacks) is one line on stderr and exit status 2. A policy or run
folder naming a `module:Name` env id is refused unless that module is named with `--import MODULE` (or `--env` names
the id): reading a file never chooses code to run. The result goes where `result_file` says: never over the
`eval.json` beside the policy unless it is that policy's own evaluation.
"""

from __future__ import annotations

import argparse
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
        "--json",
        metavar="FILE",
        help="where to write the result (default: DIR/eval.json with --video; eval.json beside the policy for its own "
        "evaluation re-run, the defaults; else nothing)",
    )


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="a run folder, a policy folder or file, or a checkpoint")
    parser.add_argument("--format", required=True, choices=("onnx", "torchscript"))
    parser.add_argument("--out", help="output file (default: policy.onnx or policy.pt beside the policy file)")
    add_import_argument(parser)


def add_import_argument(
    parser: argparse.ArgumentParser,
    use: str = "a policy or run folder naming a MODULE:Name env id is refused without it",
) -> None:
    """`--import MODULE` (repeatable): a module to import first, whose envs a file's `MODULE:Name` env id may then
    use (`use` says when); a file never chooses a module to import (surreal/envs.py `admit_env_id`)."""
    text = f"import MODULE first (your envs' module): {use}; repeatable"
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=text)


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


def peek_env_id(path: str) -> str | None:
    """The env a policy path was trained on, read without building anything (a checkpoint's run's config.yaml, a
    policy file's header); None where it cannot be read so (a bucket path, a damaged file: loading says why)."""
    from surreal.config import read_config
    from surreal.policy.artifact import read_policy_file
    from surreal.policy.load import CHECKPOINT, resolve
    from surreal.runstore import is_uri

    if is_uri(path):
        return None
    try:
        file = resolve(path)
        if CHECKPOINT.match(file.name):
            return read_config(file.parent.parent / "config.yaml").env.id
        return str(read_policy_file(file)[0]["env"]["id"])
    except Exception:  # noqa: BLE001 - `load_policy` gives the one-line reason
        return None


def run_eval(args: argparse.Namespace) -> tuple[dict[str, Any], Path | None]:
    """The evaluation `surreal eval` runs and prints, and where its result is written (`result_file`)."""
    from surreal.commands import video

    if args.episodes is not None and args.episodes < 1:
        raise EvalError(f"--episodes must be >= 1 (got {args.episodes})")
    if args.video:
        video.check_recorder()
        trained_on = args.env or peek_env_id(args.policy)
        if trained_on is None or video.needs_mujoco_gl(trained_on):
            video.choose_renderer()  # before anything imports MuJoCo (a checkpoint's env too): fixed at its import
    from surreal.config import ConfigError
    from surreal.envs import admit_env_id, import_modules, modules_named
    from surreal.policy.load import Policy, read_policy

    try:
        import_modules([*args.imports, *modules_named([args.env])])  # what the user named: --import, --env's module
        header, tensors, source = read_policy(args.policy)  # an ArtifactError passes: not a ConfigError
        env_id = args.env or header["env"]["id"]
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
    own_episodes = recorded["episodes"] if recorded else 10
    episodes = args.episodes or own_episodes
    seed = header["seed"] if args.seed is None else args.seed
    _fits(policy, env_id, env_kwargs)
    wrap = None
    if args.video:
        video.check_frames(env_id, env_kwargs, seed + EVAL_SEED_OFFSET)  # before anything is written
        video_dir = Path(args.video)
        video_dir.mkdir(parents=True, exist_ok=True)
        wrap = video.video_wrapper(video_dir)
        env_kwargs = {**env_kwargs, "render_mode": "rgb_array"}
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
        videos = video.video_files(Path(args.video), episodes)
        missing = [p.name for p in videos if not p.is_file()]
        if missing:
            raise EvalError(f"--video: RecordVideo did not write {', '.join(missing)}")
        result["videos"] = [str(p) for p in videos]
    own = env_id == policy.env_id and episodes == own_episodes and seed == header["seed"] and not args.stochastic
    return result, result_file(args, Path(policy.source), own)


def result_file(args: argparse.Namespace, policy_file: Path, own: bool) -> Path | None:
    """Where `surreal eval` writes its result: `--json FILE`; with `--video DIR`, `DIR/eval.json` beside the videos;
    the policy's own evaluation re-run (its env, seed and episode count, deterministic) `eval.json` beside the
    policy file; any other evaluation nowhere (printed only). So `eval.json` beside a policy always holds that
    policy's own evaluation, never one episode recorded for a look."""
    if args.json:
        return Path(args.json)
    if args.video:
        return Path(args.video) / "eval.json"
    return policy_file.with_name("eval.json") if own else None


def one_line(exc: BaseException) -> str:
    """An error's text as the one line the command prints (an env's own message can span several)."""
    return " ".join(str(exc).split())


def eval_main(args: argparse.Namespace) -> int:
    from surreal.commands.video import VideoError
    from surreal.policy.artifact import ArtifactError
    from surreal.runjson import write_json

    try:
        result, out = run_eval(args)
    except (EvalError, VideoError, ArtifactError) as exc:  # PolicyError is an ArtifactError
        print(f"surreal eval: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    success = f", success {result['eval_success_rate']:.0%}" if "eval_success_rate" in result else ""
    mode = "stochastic" if args.stochastic else "deterministic"
    print(
        f"{result['env']}: return {result['eval_return_mean']:.1f} ± {result['eval_return_std']:.1f} over "
        f"{result['eval_episodes']} {mode} episodes (seed {result['seed']}){success}"
    )
    videos = f" and {len(result['videos'])} videos in {args.video}" if args.video else ""
    if out is None:
        print("not written: not the policy's own evaluation (its seed and episodes); --json FILE writes it")
    else:
        write_json(out, result)
        print(f"wrote {out}{videos}")
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
