"""`surreal helm-values`: one Helm values file per member of a sweep, for running it on a cluster.

    surreal helm-values --base infra/helm/values/ddpg.yaml --out sweep/ --name pend seed=1,2,3 algo.actor_lr=1e-4,3e-4
    for f in sweep/pend-*.yaml; do helm install "$(basename "$f" .yaml)" infra/helm/surreal-chart -f "$f"; done

The overrides are `surreal run --multirun`'s (Hydra's grammar and basic sweeper, launch/sweep.py `expand`); each
member's file is the base values with the member's overrides written into `experiment:` (what the chart's ConfigMap
carries to every role) and the topology into the chart's own keys (`actors=4` and `topology.actors` set
`actors.replicas`; `topology.envs_per_actor`, `replay_shards`, `ps_replicas` set `actors.envsPerActor`,
`replay.shards`, `ps.replicas`; `learner.replicas` sets `learner.replicas`), so the workloads and the config cannot
disagree. Every member's experiment is read back with `read_config`, as the roles will read it, before any file is
written: a bad key is one line here, not a crash-looping pod. An off-policy member's env is built once, as `surreal
run` builds it, to resolve its replay's layout into `experiment.replay.layout` (the replay pods have neither the env
nor torch; launch/preflight.py), so the env's package must be installed where this runs, and an id naming a module
not typed here needs `--import`. A member's file is named after its release, `<name>-<index>`, short enough that the
chart's object names (`<release>-surreal-<role>`) stay apart; members.json maps releases to their overrides.
"""

from __future__ import annotations

import copy
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from surreal.config import ConfigError, ExperimentConfig, read_config
from surreal.config.loading import ALIASES
from surreal.fileio import atomic_write_text
from surreal.launch.runfolder import write_json
from surreal.launch.sweep import expand

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


def check_experiment(values: dict[str, Any], release: str) -> ExperimentConfig:
    """Read the member's experiment as the roles will (its topology from the chart's keys): ConfigError if not."""
    experiment = copy.deepcopy(values.get("experiment", {}))
    if "topology" in experiment:
        raise ConfigError(f"{release}: experiment.topology is the chart's: set actors.replicas, replay.shards, ...")
    experiment["topology"] = {
        key.removeprefix("topology."): values.get(section, {}).get(field, 1)
        for key, (section, field) in CHART_KEYS.items()
        if key.startswith("topology.")
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(experiment, f)
        f.flush()
        try:
            return read_config(f.name)
        except ConfigError as exc:
            raise ConfigError(f"{release}: {str(exc).replace(f'config {f.name}: ', '')}") from None


def lay_out_replay(values: dict[str, Any], cfg: ExperimentConfig, release: str, where: str) -> None:
    """Write a transition replay's layout into the member's experiment (`experiment.replay.layout`), resolved as
    `surreal run` resolves it (launch/preflight.py `checked`: the env built once, every refusal of the launcher's):
    the replay pods have neither the env nor torch, and without it a shard is laid out by its first chunk. A FIFO
    needs none (nothing is built). The env's id must import nothing the user did not name (`admit_env_id`)."""
    experiment = values.setdefault("experiment", {})
    replay = experiment.get("replay")
    if isinstance(replay, dict):
        replay.pop("layout", None)  # the base's, for another env perhaps: resolved afresh or not at all
    if cfg.replay.mode == "fifo":
        return
    from surreal.envs import admit_env_id
    from surreal.launch.preflight import checked

    try:
        admit_env_id(cfg.env.id, where)
        resolved, _ = checked(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{release}: {exc}") from None
    experiment.setdefault("replay", {})["layout"] = resolved.replay.layout


def write_values(
    overrides: Sequence[str], out: Path, name: str = "sweep", base: Path | None = None, imports: Sequence[str] = ()
) -> list[tuple[str, Path, list[str]]]:
    """One values file per member in `out` (and members.json); returns (release, file, overrides) per member.
    `imports`: modules to import first (`--import`), whose envs a base file's `module:Name` env id may name."""
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
    members, _ = expand(overrides)
    planned = []
    for index, member in enumerate(members):
        release = f"{name}-{index:03d}"
        values = member_values(loaded, member, release)
        cfg = check_experiment(values, release)
        lay_out_replay(values, cfg, release, str(base) if base else "the experiment")
        planned.append((release, values, member))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for release, values, member in planned:
        path = out / f"{release}.yaml"
        header = f"# {release}: {' '.join(member) or '(no overrides)'}" + (f" on top of {base}" if base else "")
        atomic_write_text(path, header + "\n" + yaml.safe_dump(values, sort_keys=False))
        written.append((release, path, member))
    write_json(out / "members.json", [{"release": r, "values": str(p), "overrides": m} for r, p, m in written])
    return written


def main(overrides: Sequence[str], out: str, name: str, base: str | None, imports: Sequence[str] = ()) -> int:
    """`surreal helm-values`: the files, then the commands that install and remove them."""
    try:
        written = write_values(overrides, Path(out), name, Path(base) if base else None, imports)
    except ConfigError as exc:
        print(f"surreal: {exc}", file=sys.stderr)
        return 2
    for _, path, member in written:
        print(f"{path}  ({' '.join(member) or 'no overrides'})")
    files = f"{out}/{name}-*.yaml"
    print(
        "\n# install every member (add --set-string image.tag=<tag>, -n <namespace> as for one release):\n"
        f'for f in {files}; do helm install "$(basename "$f" .yaml)" infra/helm/surreal-chart -f "$f"; done\n'
        "# remove them (each learner's run folder stays on its volume: a release of the same name resumes it):\n"
        f'for f in {files}; do helm uninstall "$(basename "$f" .yaml)"; done'
    )
    return 0
