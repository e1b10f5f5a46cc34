"""The `surreal` command.

    surreal role <replay|ps|learner|actor|inference|evaluator> [options]   start one role (what a pod runs)
    surreal run [overrides...]                 run a whole experiment as local processes
    surreal run --help                         ... and the algorithms, presets and env families there are
    surreal run --cfg job [overrides...]       print the composed config; start nothing
    surreal run --resume runs/<name> [steps=N] continue a stopped, crashed or killed run
                                               (--import MODULE: its env's module, if config.yaml names one)
    surreal run --multirun seed=1,2,3 ...      a sweep: one run per combination, and its summary
    surreal run --serial [overrides...]        every role's core in this process, no sockets (deterministic)
    surreal sim [SCENARIO] [--seed N]          the whole system simulated on a virtual clock, invariants checked
    surreal config [PREFIX] [--algo NAME]      every config key with its type, default and doc
    surreal config [PREFIX] KEY=VALUE ...      the values those overrides compose, each with where it came from
    surreal plot <run folder> [<run> ...]      learning curve PNG of a run, several overlaid, or a sweep's
                                               (a bucket's run folder too: s3://, gs://, az://)
    surreal eval <run|policy> [options]        roll a trained policy out (returns, --video MP4s, JSON)
    surreal export <run|policy> --format F     the policy as ONNX or TorchScript
    surreal helm-values [--base F] seed=1,2,3  a Helm values file per sweep member (for `helm install`)
    surreal helm-values --run runs/<name>      a laptop run's experiment as chart values
    surreal --version
    surreal probe progress --url URL           wait until a learner reports progress (helm test)

Role modules are imported only when chosen, so `surreal role replay` never loads torch and `--help`
starts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from surreal import __version__
from surreal.config import ConfigError
from surreal.settings import SettingsError

ROLES = {
    "replay": ("surreal.roles.replay", "replay shard: FIFO / uniform / prioritized experience storage"),
    "ps": ("surreal.roles.ps", "parameter server replica: serves the latest parameters to actors"),
    "learner": ("surreal.roles.learner", "the centralized learner: samples, updates, publishes, checkpoints"),
    "actor": ("surreal.roles.actor", "steps environments with the latest policy and pushes experience"),
    "inference": ("surreal.roles.inference", "batches the actors' observations and acts (topology.inference=central)"),
    "evaluator": ("surreal.roles.evaluator", "evaluates the published policy every learner.eval_interval env steps"),
}

ENVIRONMENT_HELP = "Addresses and identity come from SURREAL_* environment variables; see surreal.settings."


def build_parser() -> argparse.ArgumentParser:
    from surreal.commands import policy  # argparse only at import

    parser = argparse.ArgumentParser(prog="surreal", description="Distributed deep reinforcement learning.")
    parser.add_argument("--version", action="version", version=f"surreal {__version__}")
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
        description="Run an experiment locally. Overrides are Hydra syntax: algo.lr=1e-3 topology.actors=4;\n"
        "shorthands: env=Hopper-v5 actors=4 steps=200000 name=my-run.",
        add_help=False,  # RunHelp: the help that lists what exists, read from the registries only when asked
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_discovery(run)
    run.add_argument("overrides", nargs="*", help="config overrides, e.g. env=Hopper-v5 actors=4")
    run.add_argument("--no-progress", action="store_true", help="plain log lines instead of the live display")
    run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in this folder from its checkpoints and replay snapshots; overrides may change only "
        "its budget (steps=) and how it runs (run/resume.py)",
    )
    run.add_argument(
        "--multirun",
        "-m",
        action="store_true",
        help="sweep: one run per combination of comma-separated values (seed=1,2,3 algo.lr=3e-4,1e-3), each in "
        "runs/<sweep>/<member>, then a summary table and curves (with --resume: the sweep's unfinished members)",
    )
    run.add_argument("--jobs", type=int, default=1, metavar="N", help="with --multirun: members run N at a time")
    policy.add_import_argument(
        run,
        "with --resume, a run folder whose config.yaml names a MODULE:Name env id is refused without it (an env= you "
        "type names its module itself)",
    )
    run.add_argument(
        "--serial",
        action="store_true",
        help="every role's core in this process on in-process ports, no sockets: deterministic for a seed "
        "(run/serial.py); the same run folder, resumable with --serial --resume",
    )

    sim = commands.add_parser(
        "sim",
        help="simulate a whole experiment and its faults on a virtual clock, every invariant checked",
        description="The roles' own cores on a virtual clock, a seeded network and scripted rollouts "
        "(surreal/sim/): a scenario's faults replayed exactly from its seed. Exit 1 if an invariant broke.",
    )
    sim.add_argument("scenarios", nargs="*", help="scenario names (default: all; --list shows them)")
    sim.add_argument("--list", action="store_true", help="list the scenarios and what each does")
    sim.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    sim.add_argument("--seeds", type=int, default=1, metavar="N", help="run each scenario under N seeds from --seed")

    add_config_command(commands)

    plot = commands.add_parser("plot", help="write the learning curve of a run folder (or several, overlaid) as PNG")
    plot.add_argument(
        "run_dir",
        nargs="+",
        help="runs/<name> or s3://BUCKET/PATH/<name> (several: overlaid; a sweep's folder: its settings)",
    )
    plot.add_argument(
        "--out", help="output PNG (default: <run_dir>/learning_curve.png; several: overlay.png beside them)"
    )
    values = commands.add_parser(
        "helm-values",
        help="write a Helm values file per sweep member (overrides as for --multirun)",
        description="One values file per combination of the overrides' values, for `helm install` one release each.",
    )
    values.add_argument("overrides", nargs="*", help="config overrides, comma lists swept: seed=1,2,3 actors=8")
    values.add_argument("--base", help="values file to start from, e.g. infra/helm/values/ddpg.yaml")
    values.add_argument(
        "--run", metavar="RUN_DIR", help="start from a run folder's experiment (its config.yaml): a laptop run's"
    )
    values.add_argument("--out", default="sweep-values", help="folder for the files (default: sweep-values)")
    values.add_argument(
        "--name", help="release name prefix: releases are <name>-000, -001, ... (default: sweep; with --run, the run's)"
    )
    policy.add_import_argument(values, "for a --base file or --run whose env id names it")
    policy.add_eval_arguments(commands.add_parser("eval", help="roll a trained policy out and score it"))
    policy.add_export_arguments(commands.add_parser("export", help="write a policy as ONNX or TorchScript"))
    probe = commands.add_parser("probe", help="health checks against a running experiment")
    checks = probe.add_subparsers(dest="check", required=True)
    progress = checks.add_parser("progress", help="wait until the learner's /metrics shows updates (helm test)")
    from surreal.commands.probe import add_arguments as add_probe_arguments  # urllib and prometheus_client only

    add_probe_arguments(progress)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in ("run", "helm-values"):  # overrides after an option (`name=x --resume DIR steps=N`)
        args.overrides += [item for item in rest if not item.startswith("-")]
        rest = [item for item in rest if item.startswith("-")]
    if rest and args.command != "role":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "role":
        module = importlib.import_module(args.module)
        role_parser = argparse.ArgumentParser(
            prog=f"surreal role {args.role}", description=ROLES[args.role][1], epilog=ENVIRONMENT_HELP
        )
        if hasattr(module, "add_arguments"):  # a role without one takes no options
            module.add_arguments(role_parser)
        role_args = role_parser.parse_args(rest)
        from surreal.roles.common import end_process
        from surreal.runstore import StorageError  # fsspec-free until a bucket is used

        try:
            code = int(module.main(role_args))
        except (SettingsError, ConfigError, StorageError) as exc:  # a SURREAL_* variable, the config, the bucket
            print(f"surreal role {args.role}: {exc}", file=sys.stderr)
            return 2
        end_process(code)  # the role closed what it holds: its process ends without the interpreter's teardown
    if args.command == "run":
        if args.cfg == "job":
            return print_job_config(args.overrides, sweep=args.multirun)
        if args.multirun:
            if args.serial:
                parser.error("--serial runs one experiment: without --multirun")
            if args.jobs < 1:
                parser.error(f"--jobs must be >= 1 (got {args.jobs})")
            from surreal.commands.sweep import resume_sweep, run_sweep

            if args.resume:
                return resume_sweep(args.resume, args.overrides, args.jobs, args.imports)
            return run_sweep(args.overrides, args.jobs)
        if args.jobs != 1:
            parser.error("--jobs needs --multirun")
        from surreal.commands.run import run_experiment

        return run_experiment(args.overrides, not args.no_progress, args.resume, args.imports, serial=args.serial)
    if args.command == "config":
        return config_main(args)
    if args.command == "sim":
        from surreal.commands.sim import main as sim_main

        return sim_main(args.scenarios, args.list, args.seed, args.seeds)
    if args.command == "plot":
        from surreal.commands.plot import plot_runs
        from surreal.commands.sweep import is_sweep, plot_sweep

        try:
            args.run_dir = [cached_for_plot(where) for where in args.run_dir]
        except ConfigError as exc:
            print(f"surreal plot: {exc}", file=sys.stderr)
            return 2
        if len(args.run_dir) == 1 and is_sweep(Path(args.run_dir[0])):
            print(plot_sweep(Path(args.run_dir[0]), args.out))
        else:
            print(plot_runs(args.run_dir, args.out))
        return 0
    if args.command in ("eval", "export"):
        from surreal.commands import policy

        return policy.eval_main(args) if args.command == "eval" else policy.export_main(args)
    if args.command == "helm-values":
        from surreal.commands.helm_values import main as helm_values_main

        return helm_values_main(args.overrides, args.out, args.name, args.base, args.imports, args.run)
    if args.command == "probe":
        from surreal.commands.probe import main as probe_main

        return probe_main(args)
    parser.error(f"unknown command {args.command}")


def cached_for_plot(where: str) -> str:
    """A run folder to plot: a local path as given; a bucket's (`s3://...`) as a checked local copy of the files a
    plot reads (surreal/runstore.py `cached_run`)."""
    from surreal.run.folder import bucket_error
    from surreal.runstore import PLOT_FILES, cached_run, is_uri

    if not is_uri(where):
        return where
    try:
        local, rest = cached_run(where, PLOT_FILES)
    except Exception as exc:  # noqa: BLE001 - the backend's own (network, credentials): one line
        raise bucket_error(where, exc) from None
    if rest:
        raise ConfigError(f"{where}: a path inside a run folder; plot the run folder itself")
    return str(local)


# -- discoverability: `surreal run --help` and `--cfg job`, `surreal config` ---------------------------------


class RunHelp(argparse.Action):
    """`surreal run -h`: the usage, then the algorithms, presets and env families there are (surreal.commands.catalog
    reads them from the registries and config folders, importing gymnasium only now)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from surreal.commands.catalog import run_help_epilog

        parser.epilog = run_help_epilog()
        parser.print_help()
        parser.exit()


def add_run_discovery(run: argparse.ArgumentParser) -> None:
    run.add_argument("-h", "--help", action=RunHelp, help="show this help, the algorithms, presets and env families")
    run.add_argument(
        "-c",
        "--cfg",
        choices=["job"],
        help="print the composed config (what the run folder's config.yaml would hold) and start nothing",
    )


def print_job_config(overrides: list[str], sweep: bool = False) -> int:
    """`surreal run --cfg job ...`: the composed, validated config as YAML on stdout; nothing starts. With
    `--multirun` (`sweep`), each member's, as YAML documents headed by the member's overrides."""
    from surreal.config import load_config
    from surreal.config.loading import config_yaml

    try:
        if not sweep:
            print(config_yaml(load_config(overrides)), end="")
            return 0
        from surreal.commands.sweep import expand

        members, _ = expand(overrides)
        texts = [f"--- # {' '.join(member)}\n{config_yaml(load_config(member))}" for member in members]
    except ConfigError as exc:
        print(f"surreal: {exc}", file=sys.stderr)
        return 2
    print("".join(texts), end="")
    return 0


def add_config_command(commands: Any) -> None:
    config = commands.add_parser(
        "config",
        help="list every config key with its type, default and doc",
        description="Every key `surreal run` takes, with its type, default and doc, from the typed config "
        "(surreal/config/schema.py). Set one with KEY=VALUE on `surreal run`. With KEY=VALUE overrides (`surreal "
        "config env=Pendulum-v1 algo=sac`), the values they compose instead, each with where it came from: the user, "
        "a preset, the task's defaults (conf/tasks.yaml) or the package.",
    )
    config.add_argument(
        "args",
        nargs="*",
        metavar="PREFIX|KEY=VALUE",
        help="only keys starting with PREFIX (learner, algo.lr, env); KEY=VALUE overrides as `surreal run` takes them",
    )
    config.add_argument("--algo", help="only this algorithm's algo.* keys (default: every algorithm's)")


def config_main(args: argparse.Namespace) -> int:
    import difflib

    from surreal.commands.catalog import composed_listing, config_listing, known_prefixes
    from surreal.config.loading import compose_config
    from surreal.config.schema import ALGORITHMS

    def refused(why: object) -> int:
        print(f"surreal config: {why}", file=sys.stderr)
        return 2

    overrides = [a for a in args.args if "=" in a or a.startswith("~")]
    prefixes = [a for a in args.args if a not in overrides]
    if len(prefixes) > 1:
        return refused(f"one PREFIX at most (got {' '.join(prefixes)}); overrides are KEY=VALUE")
    prefix = prefixes[0] if prefixes else ""
    if args.algo is not None and args.algo not in ALGORITHMS:
        return refused(f"--algo {args.algo!r} is not one of {', '.join(ALGORITHMS)}")
    if overrides:
        if args.algo is not None:
            return refused("with overrides, choose the algorithm as one: algo=NAME")
        try:
            text = composed_listing(compose_config(overrides), prefix)
        except ConfigError as exc:
            return refused(exc)
    else:
        text = config_listing(prefix, args.algo)
    if not text:
        near = difflib.get_close_matches(prefix, known_prefixes(), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        return refused(f"no config key starts with {prefix!r}{hint}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
