"""`surreal helm-values`: one Helm values file per member of a sweep, for running it on a cluster.

    surreal helm-values --base infra/helm/values/ddpg.yaml --out sweep/ --name pend seed=1,2,3 algo.actor_lr=1e-4,3e-4
    for f in sweep/pend-*.yaml; do helm install "$(basename "$f" .yaml)" infra/helm/surreal-chart -f "$f"; done

The overrides are `surreal run --multirun`'s (Hydra's grammar and basic sweeper, commands/sweep.py `expand`); each
member's file is the base values with the member's overrides written into `experiment:` (what the chart's ConfigMap
carries to every role) and the topology into the chart's own keys (`actors=4` and `topology.actors` set
`actors.replicas`; `topology.envs_per_actor`, `replay_shards`, `ps_replicas` set `actors.envsPerActor`,
`replay.shards`, `ps.replicas`; `learner.replicas` sets `learner.replicas`), so the workloads and the config cannot
disagree. A member's file is named after its release, `<name>-<index>`, short enough that the chart's object names
(`<release>-surreal-<role>`) stay apart; members.json maps releases to their overrides.

Before any file is written, every member goes through `surreal run`'s checks (`check_experiment`), so a bad key, a
misspelt env id or DDPG on CartPole is the very line `surreal run` prints (exit 2), not a crash-looping pod; the env's
package must therefore be installed where this runs, and an id naming a module not typed here needs `--import`.

    surreal helm-values --run runs/first                     # the laptop run's experiment, as chart values

`--run RUN_DIR` starts from a run folder's experiment instead of an empty one (`run_values`); overrides still apply on
top, swept or not. Its releases are named after the run unless `--name` says.
"""

from __future__ import annotations

import copy
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from surreal.commands.sweep import expand
from surreal.config import ConfigError, ExperimentConfig, read_config
from surreal.config.loading import ALIASES
from surreal.fileio import atomic_write_text
from surreal.runjson import write_json

# The experiment's topology is the chart's to set (values.schema.json refuses `experiment.topology`).
CHART_KEYS = {
    "topology.actors": ("actors", "replicas"),
    "topology.envs_per_actor": ("actors", "envsPerActor"),
    "topology.replay_shards": ("replay", "shards"),
    "topology.ps_replicas": ("ps", "replicas"),
    "learner.replicas": ("learner", "replicas"),  # the learner StatefulSet's pods: the chart sets the experiment's
}
RELEASE_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]{0,26}[a-z0-9])?")  # + "-NNN-surreal" fits the chart's 40


def member_values(base: dict[str, Any], overrides: Sequence[str], release: str) -> dict[str, Any]:
    """`base` (a values mapping) with one member's overrides applied, its experiment named `release`."""
    values = copy.deepcopy(base)
    experiment = values.setdefault("experiment", {})
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.get_key_element().lstrip("+~")
        key = ALIASES.get(key, key) if not (key == "env" and isinstance(override.value(), dict)) else key
        value = override.value()
        if key == "preset":
            raise ConfigError(f"{override.input_line}: presets are not chart values; set the keys it sets instead")
        if key == "name":
            raise ConfigError(f"{override.input_line}: each member's release (and run) name is --name plus its index")
        if key == "algo":
            if _algo_name(experiment) != value:
                experiment["algo"] = {"name": value}  # the other algorithm's keys would not fit
            continue
        if key in CHART_KEYS:
            section, field = CHART_KEYS[key]
            values.setdefault(section, {})[field] = value
            continue
        node = experiment
        *parents, leaf = key.split(".")
        for part in parents:
            if part == "algo" and isinstance(node.get("algo"), str):
                node["algo"] = {"name": node["algo"]}
            node = node.setdefault(part, {})
        node[leaf] = value
    experiment["name"] = release
    return values


def _algo_name(experiment: dict[str, Any]) -> str:
    algo = experiment.get("algo", "ppo")
    return algo if isinstance(algo, str) else str(algo.get("name", "ppo"))


def check_experiment(values: dict[str, Any], where: str) -> tuple[ExperimentConfig, list[str]]:
    """The member's experiment read as the roles will (its topology from the chart's keys, as the chart's ConfigMap
    adds it), then through `surreal run`'s preflight (run/preflight.py `checked`): (the config the roles run, its
    transition replay's layout resolved, and its budget warnings), or ConfigError with `surreal run`'s message. The
    env's id must import nothing the user did not name (`admit_env_id`; `where`: the file it came from). The caller
    names the member where a sweep has several."""
    from surreal.envs import admit_env_id
    from surreal.run.preflight import checked  # gymnasium: only when files are about to be written

    experiment = copy.deepcopy(values.get("experiment", {}))
    if "topology" in experiment:
        raise ConfigError("experiment.topology is the chart's: set actors.replicas, replay.shards, ...")
    experiment["topology"] = {
        key.removeprefix("topology."): values.get(section, {}).get(field, 1)
        for key, (section, field) in CHART_KEYS.items()
        if key.startswith("topology.")
    }
    workers = int(values.get("inference", {}).get("replicas", 0))
    if workers > 0:  # the chart's central inference (templates/_helpers.tpl "surreal.experiment")
        experiment["topology"].update(inference="central", inference_workers=workers)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(experiment, f)
        f.flush()
        try:
            cfg = read_config(f.name)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace(f"config {f.name}: ", "")) from None
    admit_env_id(cfg.env.id, where)
    return checked(cfg)


def run_values(run_dir: Path) -> dict[str, Any]:
    """Chart values of the experiment in a run folder's config.yaml: `experiment` with every key the run resolved,
    but those the chart sets (the topology, the learner's replicas) moved to the chart's keys, the algorithm's copy
    of the experiment's seed (the loader adds it) and the run's name (each release names its own) left out."""
    from omegaconf import OmegaConf

    from surreal.config import algo_config

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--run {run_dir}: no config.yaml there, so no run's experiment to deploy")
    cfg = read_config(path)
    tree = cast("dict[str, Any]", OmegaConf.to_container(OmegaConf.structured(replace(cfg, algo=algo_config(cfg)))))
    topology = tree.pop("topology")
    tree.pop("name")
    tree["algo"].pop("seed", None)
    values: dict[str, Any] = {"experiment": tree}
    for key, (section, field) in CHART_KEYS.items():
        group, _, name = key.partition(".")
        source = topology if group == "topology" else tree[group]
        values.setdefault(section, {})[field] = source.pop(name)
    if topology.pop("inference") == "central":
        values["inference"] = {"replicas": topology.pop("inference_workers")}
    return values


def release_prefix(run_dir: Path) -> str:
    """A release name prefix from a run folder's name: lowercase, '-' for anything else, at most 28 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_dir.resolve().name.lower()).strip("-")
    return name[:28].rstrip("-") or "run"


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, mappings merged key by key (as Helm merges values files); `experiment` replaced
    whole (a run's is complete)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "experiment":
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def lay_out_replay(values: dict[str, Any], cfg: ExperimentConfig) -> None:
    """Write the replay's layout, resolved as `surreal run` resolves it (`check_experiment`), into the member's
    experiment (`experiment.replay.layout`): the replay pods have neither the env nor torch, and without it a
    transition shard is laid out by its first chunk and a FIFO takes any well-formed chunk. A base's or a run's layout
    goes either way (for another env perhaps)."""
    experiment = values.setdefault("experiment", {})
    replay = experiment.get("replay")
    if isinstance(replay, dict):
        replay.pop("layout", None)
    if cfg.replay.layout is not None:
        experiment.setdefault("replay", {})["layout"] = cfg.replay.layout


def write_values(
    overrides: Sequence[str],
    out: Path,
    name: str,
    base: Path | None = None,
    run: Path | None = None,
    warn: Any = None,
    imports: Sequence[str] = (),
) -> list[tuple[str, Path, list[str]]]:
    """One values file per member in `out` (and members.json), released as `<name>-NNN`; returns (release, file,
    overrides) per member. `run`: the members start from that run folder's experiment (`run_values`); `warn`:
    called with each distinct preflight warning (budget warnings, as `surreal run` prints them); `imports`: modules
    to import first (`--import`), whose envs a base file's or a run's `module:Name` env id may name."""
    from surreal.envs import env_ids_in, import_modules, modules_named

    import_modules([*imports, *modules_named(env_ids_in(overrides))])
    if not RELEASE_PREFIX.fullmatch(name):
        raise ConfigError(
            f"--name {name!r}: a release name prefix is lowercase letters, digits and '-', at most 28 characters"
        )
    try:
        loaded = yaml.safe_load(base.read_text(encoding="utf-8")) if base else {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--base {base}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"--base {base}: not a mapping of values")
    if run is not None:
        loaded = merged(loaded, run_values(run))
    where = str(run / "config.yaml") if run is not None else str(base) if base else "the experiment"
    members, _ = expand(overrides)
    planned, said = [], []
    for index, member in enumerate(members):
        release = f"{name}-{index:03d}"
        try:
            values = member_values(loaded, member, release)
            cfg, warnings = check_experiment(values, where)
        except ConfigError as exc:  # a sweep names the member; one experiment gets `surreal run`'s very line
            raise (ConfigError(f"{release}: {exc}") if len(members) > 1 else exc) from None
        lay_out_replay(values, cfg)
        said += [line for line in warnings if line not in said]
        planned.append((release, values, member))
    for line in said:
        if warn is not None:
            warn(line)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for release, values, member in planned:
        path = out / f"{release}.yaml"
        header = f"# {release}: {' '.join(member) or '(no overrides)'}" + (f" on top of {base}" if base else "")
        header += f", the experiment of {run}" if run is not None else ""
        atomic_write_text(path, header + "\n" + yaml.safe_dump(values, sort_keys=False))
        written.append((release, path, member))
    write_json(out / "members.json", [{"release": r, "values": str(p), "overrides": m} for r, p, m in written])
    return written


def main(
    overrides: Sequence[str],
    out: str,
    name: str | None,
    base: str | None,
    imports: Sequence[str] = (),
    run: str | None = None,
) -> int:
    """`surreal helm-values`: the files, then the commands that install and remove them."""

    def warn(line: str) -> None:
        print(f"surreal: warning: {line}", file=sys.stderr, flush=True)

    run_dir = Path(run) if run else None
    name = name or (release_prefix(run_dir) if run_dir is not None else "sweep")
    try:
        written = write_values(overrides, Path(out), name, Path(base) if base else None, run_dir, warn, imports)
    except ConfigError as exc:
        print(f"surreal: {exc}", file=sys.stderr)
        return 2
    for _, path, member in written:
        print(f"{path}  ({' '.join(member) or 'no overrides'})")
    files = f"{Path(out) / name}-*.yaml"
    print(
        "\n# install every member (add --set-string image.tag=<tag>, -n <namespace> as for one release):\n"
        f'for f in {files}; do helm install "$(basename "$f" .yaml)" infra/helm/surreal-chart -f "$f"; done\n'
        "# remove them (each learner's run folder stays on its volume: a release of the same name resumes it):\n"
        f'for f in {files}; do helm uninstall "$(basename "$f" .yaml)"; done'
    )
    return 0
