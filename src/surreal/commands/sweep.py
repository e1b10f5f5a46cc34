"""`surreal run --multirun`: one `surreal run` per combination of values, a few at a time, and a summary.

    surreal run --multirun seed=1,2,3 algo.lr=3e-4,1e-3 env=Hopper-v5 --jobs 2
    surreal run --multirun --resume runs/<sweep>        # the members that did not complete, resumed

Overrides are Hydra's, with its multirun grammar and its basic sweeper's meaning: `key=a,b,c` (or
`range(1,4)`, `choice(...)`) lists values, and the members are the cartesian product of every list, in the
order given (Hydra's `BasicSweeper`, by Hydra's own override parser). `name=` names the sweep's folder.

    runs/<sweep>/sweep.json        the members: their folder, overrides, swept values, status
    runs/<sweep>/<member>/         an ordinary run folder per member (`surreal plot`, `--resume` work on it)
    runs/<sweep>/logs/<member>.log each member's launcher output
    runs/<sweep>/summary.{md,csv,json}  final eval mean +- std across seeds, per setting
    runs/<sweep>/curves.png        each setting's mean and spread (min to max) across seeds, against env steps

A setting is a member's swept values other than `seed`; its seeds are its members. Each member is the very
`surreal run` a user would type (its own launcher, supervised roles and summary), started as a child of this
process in a group of its own: Ctrl-C stops the sweep, which stops the running members (each saves its state,
so `--resume` continues them) and starts no more.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from surreal.config import ConfigError, load_config, read_config
from surreal.config.schema import NOT_IN_RUN_NAME, RUN_NAME, RUN_NAME_RULE
from surreal.envs import admit_env_id, check_env_id, env_ids_in, import_modules, modules_named
from surreal.launch.supervisor import ProcessSpec, Supervisor
from surreal.roles.common import StopFlag
from surreal.run.folder import RunFolderLock, run_name, runs_root
from surreal.runjson import EXIT_CODES, read_eval, read_json, read_json_strict, write_json

SWEEP_FILE = "sweep.json"
POLL_S = 0.5
# SIGTERM to SIGKILL for a member's launcher: it stops its actors, then gives its learner (120 s) and its replay
# shards (60 s) their grace periods to save their state (launch/local.py), each exiting as soon as it has.
MEMBER_GRACE_S = 240.0


@dataclass(frozen=True)
class Member:
    """One run of the sweep: its folder name, its overrides (without `name=`), and the values it was given for
    the swept keys."""

    name: str
    overrides: list[str]
    swept: dict[str, str]

    @property
    def setting(self) -> dict[str, str]:
        """What it is compared by: its swept values other than the seed."""
        return {key: value for key, value in self.swept.items() if key != "seed"}


def expand(overrides: Sequence[str]) -> tuple[list[list[str]], list[str]]:
    """Hydra's basic sweeper: (the overrides of every member, the keys that take several values). A plain
    override is in every member; a sweep (`k=a,b`, `k=range(1,4)`) gives one member per value, and several
    sweeps their cartesian product, the first varying slowest."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    lists: list[list[str]] = []
    swept: list[str] = []
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise ConfigError(f"{override.input_line}: an interval sweep needs a search, not a grid")
            values = [f"{key}={value}" for value in override.sweep_string_iterator()]
            lists.append(values)
            if len(values) > 1:
                swept.append(key)
        else:
            lists.append([f"{key}={override.get_value_element_as_str()}"])
    return [list(combo) for combo in itertools.product(*lists)], swept


def member_name(index: int, swept: dict[str, str]) -> str:
    """`000-seed_1-algo.lr_0.0003`: the index (unique, in launch order) and the swept values, as a folder name."""
    parts = [f"{index:03d}", *(f"{key}_{value}" for key, value in swept.items())]
    return NOT_IN_RUN_NAME.sub("_", "-".join(parts))[:100]


def plan_members(overrides: Sequence[str]) -> tuple[str | None, list[Member]]:
    """(the sweep's `name=` if given, its members); a bad override, or a member whose config does not load, is a
    ConfigError naming that member, before anything starts."""
    name = None
    rest = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.strip() == "name":
            if "," in value:
                raise ConfigError("name= names the sweep's folder: it cannot be swept")
            name = value.strip()
        else:
            rest.append(item)
    combos, swept_keys = expand(rest)
    members = []
    for index, combo in enumerate(combos):
        swept = {key: value for key, _, value in (item.partition("=") for item in combo) if key in swept_keys}
        member = Member(member_name(index, swept), combo, swept)
        try:
            cfg = load_config(member.overrides)
            check_env_id(cfg.env.id, cfg.env.kwargs)
        except ConfigError as exc:
            label = setting_label(swept) or "the only member"
            raise ConfigError(f"sweep member {index} ({label}): {exc}") from None
        members.append(member)
    return name, members


def create_sweep_folder(name: str | None, members: list[Member], overrides: Sequence[str], jobs: int) -> Path:
    """`<runs root>/<name>/` with sweep.json; an existing sweep there is refused (resume it instead). Without a
    name: the first member's run name (`<YYYYmmdd-HHMMSS>-<algo>-<env>`) and `-sweep`."""
    name = name or f"{run_name(load_config(members[0].overrides))}-sweep"
    if not RUN_NAME.fullmatch(name):
        raise ConfigError(f"name={name!r} {RUN_NAME_RULE}")
    sweep_dir = (runs_root() / name).resolve()
    if (sweep_dir / SWEEP_FILE).exists() or (sweep_dir / "metrics.jsonl").exists():
        raise ConfigError(f"{sweep_dir} already holds a sweep or a run; choose another name= (or --resume it)")
    try:
        (sweep_dir / "logs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the sweep folder {sweep_dir}: {exc.strerror or exc}") from None
    write_json(
        sweep_dir / SWEEP_FILE,
        {
            "name": name,
            "overrides": list(overrides),
            "jobs": jobs,
            "command": sys.argv,
            "started_at": round(time.time(), 3),
            "members": [{**asdict(m), "status": "pending", "exit_code": None} for m in members],
        },
    )
    return sweep_dir


def read_plan(sweep_dir: Path) -> dict[str, Any]:
    """sweep.json, bounded before it is parsed (runjson.py `RUN_JSON`); ConfigError, one line, when it is
    missing, over its bounds or holds no list of members."""
    try:
        plan = read_json_strict(sweep_dir / SWEEP_FILE)
    except OSError as exc:
        raise ConfigError(f"{sweep_dir}: no readable sweep plan ({SWEEP_FILE}: {exc.strerror or exc})") from None
    if not isinstance(plan.get("members"), list):
        raise ConfigError(f"{sweep_dir}: no readable sweep plan ({SWEEP_FILE} lists no members)")
    return plan


def members_of(plan: dict[str, Any]) -> list[Member]:
    """The plan's members, each checked: a folder name that is a run name (never a path out of the sweep's folder),
    overrides and swept values that are strings. ConfigError, one line, for any other."""
    members = []
    for i, m in enumerate(plan["members"]):
        try:
            member = Member(m["name"], list(m["overrides"]), dict(m["swept"]))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{SWEEP_FILE}: member {i} is not a name, overrides and swept values") from None
        texts = [*member.overrides, *member.swept, *member.swept.values()]
        if not isinstance(member.name, str) or not RUN_NAME.fullmatch(member.name):
            raise ConfigError(f"{SWEEP_FILE}: member {i}'s name {str(member.name)[:100]!r} {RUN_NAME_RULE}")
        if not all(isinstance(text, str) for text in texts):
            raise ConfigError(f"{SWEEP_FILE}: member {i}'s overrides and swept values must be strings")
        members.append(member)
    return members


# -- running ----------------------------------------------------------------------------------------------


def run_sweep(overrides: Sequence[str], jobs: int = 1) -> int:
    """`surreal run --multirun ...`. Exit code: 0 every member completed, 1 one did not, 2 bad config, 130 stopped."""
    try:
        name, members = plan_members(overrides)
        sweep_dir = create_sweep_folder(name, members, overrides, jobs)
        lock = RunFolderLock(sweep_dir)
    except ConfigError as exc:
        print(f"surreal: {exc}", file=sys.stderr)
        return 2
    swept = sorted({key for m in members for key in m.swept})
    print(
        f"[surreal] sweep {sweep_dir.name}: {len(members)} member(s) over {', '.join(swept) or 'nothing'}, "
        f"{jobs} at a time, in {sweep_dir}",
        flush=True,
    )
    plan = [(m, [*in_sweep_folder(m.overrides, sweep_dir.name), f"name={m.name}"]) for m in members]
    return drive(sweep_dir, lock, plan, jobs)


def in_sweep_folder(overrides: Sequence[str], sweep: str) -> list[str]:
    """A member's overrides with `run_uri=X` made `run_uri=X/<sweep>`: its run folder is mirrored at
    X/<sweep>/<member>, as it lies in runs/<sweep>/<member>, so two sweeps' members of one name never meet."""
    return [
        f"run_uri={item.partition('=')[2].rstrip('/')}/{sweep}" if item.partition("=")[0].strip() == "run_uri" else item
        for item in overrides
    ]


def resume_sweep(
    where: str | os.PathLike[str], overrides: Sequence[str], jobs: int = 1, imports: Sequence[str] = ()
) -> int:
    """`surreal run --multirun --resume runs/<sweep> [budget overrides]`: every member that did not complete is
    resumed (or started, if it never was); with overrides (a larger `steps=`), every member is. A sweep folder is as
    untrusted as a run folder: a member's env (its config.yaml's, or sweep.json's overrides') is made only if its id
    imports nothing the user did not name (`imports`, an `env=` override: surreal/envs.py `admit_env_id`)."""
    try:
        import_modules([*imports, *modules_named(env_ids_in(overrides))])
        sweep_dir = Path(where) if Path(where).exists() else runs_root() / where
        sweep_dir = sweep_dir.resolve()
        members = members_of(read_plan(sweep_dir))
        plan: list[tuple[Member, list[str]]] = []
        allow = [f"--import={module}" for module in imports]
        for member in members:
            run_dir = sweep_dir / member.name
            status = _summary_status(run_dir)
            if status == "completed" and not overrides:
                continue
            if (run_dir / "config.yaml").is_file():
                admit_env_id(read_config(run_dir / "config.yaml").env.id, str(run_dir / "config.yaml"))
                plan.append((member, ["--resume", str(run_dir), *overrides, *allow]))
            else:
                admit_env_id(load_config(member.overrides).env.id, f"{sweep_dir / SWEEP_FILE} (member {member.name})")
                member_args = [*in_sweep_folder(member.overrides, sweep_dir.name), *overrides, f"name={member.name}"]
                plan.append((member, [*member_args, *allow]))
        lock = RunFolderLock(sweep_dir, hint="it is still running; stop it first")
    except ConfigError as exc:
        print(f"surreal: {exc}", file=sys.stderr)
        return 2
    print(
        f"[surreal] sweep {sweep_dir.name}: resuming {len(plan)} of {len(members)} member(s), {jobs} at a time",
        flush=True,
    )
    return drive(sweep_dir, lock, plan, jobs)


def _summary_status(run_dir: Path) -> str | None:
    return (read_json(run_dir / "summary.json") or {}).get("status")


def drive(sweep_dir: Path, lock: RunFolderLock, plan: list[tuple[Member, list[str]]], jobs: int) -> int:
    """Run `surreal run <args>` for each (member, args), `jobs` at a time, record each member's status in
    sweep.json as it ends, then write the summary. Holds `lock` (the sweep folder's) throughout."""
    env = {**os.environ, "SURREAL_RUNS_ROOT": str(sweep_dir), "PYTHONUNBUFFERED": "1"}
    pending = deque(plan)
    running: dict[str, Member] = {}
    total = len(plan)
    with lock, StopFlag() as stop, Supervisor(sweep_dir / "logs") as supervisor:
        while (pending or running) and not stop:
            while pending and len(running) < jobs and not stop:
                member, args = pending.popleft()
                argv = [sys.executable, "-m", "surreal", "run", *args, "--no-progress"]
                spec = ProcessSpec(member.name, "member", 0, argv, env, restart="never", grace_s=MEMBER_GRACE_S)
                supervisor.start(spec)
                running[member.name] = member
                _record(sweep_dir, member.name, "running", None)
                done = total - len(pending) - len(running)
                print(f"[surreal] started {member.name} ({done} of {total} done, {len(running)} running)", flush=True)
            time.sleep(POLL_S)
            supervisor.poll()
            for name in list(running):
                code = supervisor.returncode(name)
                if code is None:
                    continue
                del running[name]
                status = _summary_status(sweep_dir / name) or "failed"
                _record(sweep_dir, name, status, code)
                print(f"[surreal] {name}: {_result_line(sweep_dir / name, status)}", flush=True)
        if stop:
            print(f"[surreal] sweep stopped; stopping {len(running)} running member(s)", flush=True)
    for name in running:  # stopped with the sweep: their own summaries say how far they got
        _record(sweep_dir, name, _summary_status(sweep_dir / name) or "interrupted", None)
    summary = write_sweep_summary(sweep_dir)
    print(summary_markdown(summary), flush=True)
    print(f"[surreal] sweep folder {sweep_dir} (summary.md, summary.csv, summary.json, curves.png)", flush=True)
    if stop:
        return EXIT_CODES["interrupted"]
    statuses = [m["status"] for m in read_plan(sweep_dir)["members"]]
    return 0 if all(s == "completed" for s in statuses) else 1


def _record(sweep_dir: Path, name: str, status: str, exit_code: int | None) -> None:
    plan = read_plan(sweep_dir)
    for member in plan["members"]:
        if member["name"] == name:
            member["status"], member["exit_code"] = status, exit_code
    write_json(sweep_dir / SWEEP_FILE, plan)


def _result_line(run_dir: Path, status: str) -> str:
    evaluation = read_eval(run_dir)
    if "eval_return_mean" in evaluation:
        mean, std = evaluation["eval_return_mean"], evaluation.get("eval_return_std") or 0.0
        return f"{status}, eval {mean:.1f} +- {std:.1f} at {int(evaluation.get('env_steps', 0)):,} env steps"
    return f"{status} (no final eval; see {run_dir.parent / 'logs' / (run_dir.name + '.log')})"


# -- the summary ------------------------------------------------------------------------------------------


def setting_label(setting: dict[str, str]) -> str:
    return " ".join(f"{key}={value}" for key, value in setting.items())


def _experiment_label(member: Member) -> str:
    """`sac on Pendulum-v1`: what a sweep of seeds only (one setting) is called."""
    try:
        cfg = load_config(member.overrides)
    except ConfigError:
        return "all members"
    return f"{cfg.algo.name} on {cfg.env.id}"


def sweep_summary(sweep_dir: Path) -> dict[str, Any]:
    """Per setting, the members' final evals (eval.json's `eval_return_mean`) and their mean and standard
    deviation across seeds (population: the seeds run are the whole sample reported). Members without an
    eval.json are listed and left out of the numbers."""
    plan = read_plan(sweep_dir)
    groups: dict[str, dict[str, Any]] = {}
    for entry, member in zip(plan["members"], members_of(plan), strict=True):
        label = setting_label(member.setting) or _experiment_label(member)
        group = groups.setdefault(label, {"setting": member.setting, "label": label, "members": []})
        evaluation = read_eval(sweep_dir / member.name)
        group["members"].append(
            {
                "name": member.name,
                "seed": _seed_of(sweep_dir / member.name),
                "status": entry.get("status"),
                "eval_return_mean": evaluation.get("eval_return_mean"),
                "env_steps": evaluation.get("env_steps"),
            }
        )
    settings = []
    for group in groups.values():
        finals = [m["eval_return_mean"] for m in group["members"] if m["eval_return_mean"] is not None]
        settings.append(
            {
                **group,
                "n": len(finals),
                "eval_return_mean": statistics.fmean(finals) if finals else None,
                "eval_return_std": statistics.pstdev(finals) if finals else None,
                "eval_return_min": min(finals, default=None),
                "eval_return_max": max(finals, default=None),
            }
        )
    return {"name": plan.get("name", sweep_dir.name), "sweep_dir": str(sweep_dir), "settings": settings}


def _seed_of(run_dir: Path) -> int | None:
    try:
        return int(yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))["seed"])
    except (OSError, yaml.YAMLError, TypeError, KeyError, ValueError):
        return None


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"# sweep {summary['name']}",
        "",
        "| setting | seeds | final eval (mean ± std across seeds) | per seed |",
        "|---|---|---|---|",
    ]
    for s in summary["settings"]:
        seeds = ", ".join(str(m["seed"]) for m in s["members"])
        numbers = "-" if s["eval_return_mean"] is None else f"{s['eval_return_mean']:.1f} ± {s['eval_return_std']:.1f}"
        per_seed = ", ".join(
            f"{m['seed']}: {m['eval_return_mean']:.1f}"
            if m["eval_return_mean"] is not None
            else f"{m['seed']}: {m['status']}"
            for m in s["members"]
        )
        lines.append(f"| {s['label']} | {seeds} | {numbers} (n={s['n']}) | {per_seed} |")
    return "\n".join(lines)


def summary_csv(summary: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["setting", "n", "seeds", "eval_return_mean", "eval_return_std", "per_seed"])
    for s in summary["settings"]:
        writer.writerow(
            [
                s["label"],
                s["n"],
                " ".join(str(m["seed"]) for m in s["members"]),
                s["eval_return_mean"],
                s["eval_return_std"],
                " ".join(str(m["eval_return_mean"]) for m in s["members"]),
            ]
        )
    return out.getvalue()


def is_sweep(path: Path) -> bool:
    return (path / SWEEP_FILE).is_file()


def plot_sweep(sweep_dir: Path, out: str | Path | None = None, summary: dict[str, Any] | None = None) -> str:
    """curves.png (or `out`): each setting's mean and spread across its seeds (commands/plot.py `sweep_figure`)."""
    from surreal.commands.plot import sweep_figure

    summary = summary or sweep_summary(sweep_dir)
    groups = [(s["label"], [sweep_dir / m["name"] for m in s["members"]]) for s in summary["settings"]]
    path = Path(out) if out else sweep_dir / "curves.png"
    sweep_figure(groups, title=f"sweep {summary['name']}").savefig(path, dpi=120)
    return str(path)


def write_sweep_summary(sweep_dir: Path) -> dict[str, Any]:
    """summary.json, summary.md, summary.csv and curves.png in the sweep folder; returns summary.json's content."""
    from surreal.commands.plot import NoMetricsError
    from surreal.fileio import atomic_write_text

    summary = sweep_summary(sweep_dir)
    write_json(sweep_dir / "summary.json", summary)
    atomic_write_text(sweep_dir / "summary.md", summary_markdown(summary) + "\n")
    atomic_write_text(sweep_dir / "summary.csv", summary_csv(summary))
    try:
        plot_sweep(sweep_dir, summary=summary)
    except NoMetricsError as exc:  # no member got as far as a training return: the table says the rest
        print(f"[surreal] no curves.png: {exc}", flush=True)
    return summary
