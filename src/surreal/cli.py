"""The `surreal` command.

    surreal role <replay|ps|learner|actor|evaluator> [options]   start one role (what a pod runs)
    surreal run [overrides...]                 run a whole experiment as local processes
    surreal plot <run folder>                  learning curve PNG of a run
    surreal eval <run|policy> [options]        roll a trained policy out (returns, --video MP4s, JSON)
    surreal export <run|policy> --format F     the policy as ONNX or TorchScript
    surreal probe progress --url URL           wait until a learner reports progress (helm test)

Role modules are imported only when chosen, so `surreal role replay` never loads torch and `--help`
starts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from surreal.config import ConfigError
from surreal.settings import SettingsError

ROLES = {
    "replay": ("surreal.roles.replay", "replay shard: FIFO / uniform / prioritized experience storage"),
    "ps": ("surreal.roles.ps", "parameter server replica: serves the latest parameters to actors"),
    "learner": ("surreal.roles.learner", "the centralized learner: samples, updates, publishes, checkpoints"),
    "actor": ("surreal.roles.actor", "steps environments with the latest policy and pushes experience"),
    "evaluator": ("surreal.roles.evaluator", "evaluates the published policy every learner.eval_interval env steps"),
}

ENVIRONMENT_HELP = "Addresses and identity come from SURREAL_* environment variables; see surreal.settings."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="surreal", description="Distributed deep reinforcement learning.")
    commands = parser.add_subparsers(dest="command", required=True)

    role = commands.add_parser("role", help="start one role of an experiment", epilog=ENVIRONMENT_HELP)
    roles = role.add_subparsers(dest="role", required=True)
    for name, (module, summary) in ROLES.items():
        # The role's own options (and its --help) are parsed in main(): importing its module here
        # would load torch for every command.
        sub = roles.add_parser(name, help=summary, add_help=False)
        sub.set_defaults(module=module)

    run = commands.add_parser(
        "run",
        help="run an experiment as local processes (replay, ps, learner, actors)",
        description="Run an experiment locally. Overrides are Hydra syntax: algo.lr=1e-3 topology.actors=4; "
        "shorthands: env=Hopper-v5 actors=4 steps=200000 name=my-run.",
    )
    run.add_argument("overrides", nargs="*", help="config overrides, e.g. env=Hopper-v5 actors=4")
    run.add_argument("--no-progress", action="store_true", help="plain log lines instead of the live display")

    plot = commands.add_parser("plot", help="write the learning curve of a run folder as PNG")
    plot.add_argument("run_dir", help="runs/<name>")
    plot.add_argument("--out", help="output PNG (default: <run_dir>/learning_curve.png)")
    from surreal.launch import policy_cli  # argparse only at import

    policy_cli.add_eval_arguments(commands.add_parser("eval", help="roll a trained policy out and score it"))
    policy_cli.add_export_arguments(commands.add_parser("export", help="write a policy as ONNX or TorchScript"))
    probe = commands.add_parser("probe", help="health checks against a running experiment")
    checks = probe.add_subparsers(dest="check", required=True)
    progress = checks.add_parser("progress", help="wait until the learner's /metrics shows updates (helm test)")
    from surreal.launch.probe import add_arguments as add_probe_arguments  # urllib and prometheus_client only

    add_probe_arguments(progress)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "role":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "role":
        module = importlib.import_module(args.module)
        role_parser = argparse.ArgumentParser(
            prog=f"surreal role {args.role}", description=ROLES[args.role][1], epilog=ENVIRONMENT_HELP
        )
        module.add_arguments(role_parser)
        role_args = role_parser.parse_args(rest)
        try:
            return int(module.main(role_args))
        except (SettingsError, ConfigError) as exc:  # a SURREAL_* variable or the config file: one line
            print(f"surreal role {args.role}: {exc}", file=sys.stderr)
            return 2
    if args.command == "run":
        from surreal.launch.local import run_experiment

        return run_experiment(args.overrides, live=not args.no_progress)
    if args.command == "plot":
        from surreal.launch.plot import plot_run

        print(plot_run(args.run_dir, args.out))
        return 0
    if args.command in ("eval", "export"):
        from surreal.launch import policy_cli

        return policy_cli.eval_main(args) if args.command == "eval" else policy_cli.export_main(args)
    if args.command == "probe":
        from surreal.launch.probe import main as probe_main

        return probe_main(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
