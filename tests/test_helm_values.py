"""Sweeps and resume on the cluster: `surreal helm-values` writes one values file per sweep member that the chart
renders as that member (schema-checked by `helm template`), refuses what `surreal run` refuses with its very line,
turns a laptop run's folder into the values of the same experiment, and a release installed again under the same
name binds the same learner and replay volumes, whose learner starts with `--resume`: it continues the run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from surreal.cli import main
from surreal.commands.helm_values import write_values
from surreal.config import ConfigError, load_config, read_config
from surreal.run.folder import create_run_folder
from surreal.run.preflight import checked
from surreal.run.resume import changed_keys
from test_chart import CHART, VALUES_DIR, by_kind, env_of, experiment_of, find, helm

pytestmark = pytest.mark.infra  # needs helm, under .tools/

BASE = VALUES_DIR / "ddpg.yaml"


def template(release: str, *values: Path) -> list[dict]:
    args = [helm(), "template", release, str(CHART), "--namespace", "sweeps"]
    for path in values:
        args += ["-f", str(path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_each_member_file_renders_as_that_member(tmp_path):
    written = write_values(["seed=1,2", "algo.actor_lr=1e-4,3e-4", "actors=4"], tmp_path, "pend", BASE)
    assert [release for release, _, _ in written] == ["pend-000", "pend-001", "pend-002", "pend-003"]
    expected = [(1, 1e-4), (1, 3e-4), (2, 1e-4), (2, 3e-4)]
    for (release, path, overrides), (seed, actor_lr) in zip(written, expected, strict=True):
        assert path == tmp_path / f"{release}.yaml" and overrides[0] == f"seed={seed}"
        docs = template(release, path)  # the chart's values.schema.json checks the file
        experiment = experiment_of(docs)
        assert experiment["seed"] == seed and experiment["algo"]["actor_lr"] == actor_lr
        assert experiment["algo"]["name"] == "ddpg" and experiment["replay"]["mode"] == "prioritized", "the base's"
        assert experiment["topology"]["actors"] == 4 and experiment["name"] == release
        assert find(docs, "StatefulSet", "actor")["spec"]["replicas"] == 4
        assert find(docs, "StatefulSet", "learner")["metadata"]["name"] == f"{release}-surreal-learner"
    members = yaml.safe_load((tmp_path / "members.json").read_text())
    assert [m["release"] for m in members] == ["pend-000", "pend-001", "pend-002", "pend-003"]


def test_the_command_prints_the_files_and_the_install_loop(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "surreal", "helm-values", "seed=1,2,3", "--out", str(tmp_path / "v"), "--name", "s"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert f'for f in {tmp_path / "v"}/s-*.yaml; do helm install "$(basename "$f" .yaml)"' in out.stdout
    assert sorted(p.name for p in (tmp_path / "v").glob("*.yaml")) == ["s-000.yaml", "s-001.yaml", "s-002.yaml"]
    assert experiment_of(template("s-002", tmp_path / "v" / "s-002.yaml"))["seed"] == 3


@pytest.mark.parametrize(
    ("overrides", "name", "says"),
    [
        (["seed=1,2", "algo.actr_lr=1e-3"], "s", "s-000: algo.actr_lr"),
        (["preset=td3"], "s", "presets are not chart values"),
        (["name=x"], "s", "each member's release (and run) name is --name plus its index"),
        (["seed=1"], "Bad_Name", "a release name prefix is lowercase letters"),
        (["seed=1"], "a-much-too-long-release-prefix", "at most 28 characters"),
    ],
)
def test_a_member_the_roles_could_not_read_is_refused_before_any_file_is_written(tmp_path, overrides, name, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        write_values(overrides, tmp_path / "v", name, BASE)
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize(
    "overrides", [["env=HalfCheeta-v5"], ["algo=ddpg", "env=CartPole-v1"]], ids=["misspelt-env", "ddpg-on-cartpole"]
)
def test_what_surreal_run_refuses_is_refused_with_its_very_line_and_nothing_written(
    tmp_path, capsys, monkeypatch, overrides
):
    """The same reading and preflight as `surreal run` (the env built once, its spaces against the algorithm's)."""
    monkeypatch.setenv("SURREAL_RUNS_ROOT", str(tmp_path / "runs"))
    assert main(["run", *overrides]) == 2
    run_says = capsys.readouterr().err
    assert run_says.count("\n") == 1 and run_says.startswith("surreal: "), run_says
    assert main(["helm-values", *overrides, "--out", str(tmp_path / "v")]) == 2
    assert capsys.readouterr().err == run_says
    assert not (tmp_path / "v").exists() and not (tmp_path / "runs").exists()


def test_a_run_folders_experiment_becomes_chart_values_in_one_command(tmp_path):
    """`surreal helm-values --run runs/<name>`: the laptop run's config.yaml (every key resolved, which the chart's
    schema refuses as it stands: `topology`, `algo.seed`) as one values file that validates against the schema and
    renders as that very experiment: read back from the ConfigMap, only its name differs (the release's)."""
    laptop = ["algo=sac", "env=Pendulum-v1", "seed=7", "actors=3", "topology.replay_shards=2", "steps=100000"]
    laptop += ["algo.actor_lr=0.001", "learner.eval_interval=5000", "env.kwargs.max_episode_steps=150"]
    resolved, _ = checked(load_config([*laptop, "name=Laptop_SAC.1"]))  # as `surreal run` writes config.yaml
    run_dir, cfg, lock = create_run_folder(resolved, laptop, tmp_path / "runs")
    lock.release()
    schema = json.loads((CHART / "values.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"experiment": yaml.safe_load((run_dir / "config.yaml").read_text())}, schema)
    out = tmp_path / "values"
    assert main(["helm-values", "--run", str(run_dir), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.yaml")) == ["laptop-sac-1-000.yaml"], "named after the run"
    path = out / "laptop-sac-1-000.yaml"
    jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    docs = template("laptop-sac-1-000", path)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump(experiment_of(docs)))
    assert changed_keys(cfg, read_config(rendered)) == {"name": ("Laptop_SAC.1", "laptop-sac-1-000")}
    assert find(docs, "StatefulSet", "actor")["spec"]["replicas"] == 3
    assert find(docs, "StatefulSet", "replay")["spec"]["replicas"] == 2
    find(docs, "Deployment", "evaluator")  # the run's evaluator too: its interval is below its budget


def test_a_release_installed_again_under_its_name_resumes_its_run():
    """Helm leaves a StatefulSet's volume claims behind on uninstall (the chart sets no retention policy that
    deletes them), claims are named after the release, and the learner always starts with --resume from the run
    folder on its claim: `helm install <same name>` continues the run; another name starts a new one."""
    claims = {}
    for release in ("pend-000", "pend-000", "pend-001"):
        docs = template(release, BASE)
        learner = find(docs, "StatefulSet", "learner")
        container = learner["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["--resume"] and env_of(container)["SURREAL_RUN_DIR"] == "/data/run"
        for workload in by_kind(docs, "StatefulSet"):
            assert "persistentVolumeClaimRetentionPolicy" not in workload["spec"], "volumes outlive the release"
        replay = find(docs, "StatefulSet", "replay")
        claims.setdefault(release, []).append(
            [
                f"{template_['metadata']['name']}-{workload['metadata']['name']}-0"
                for workload in (learner, replay)
                for template_ in workload["spec"]["volumeClaimTemplates"]
            ]
        )
    assert (
        claims["pend-000"][0]
        == claims["pend-000"][1]
        == [
            "checkpoints-pend-000-surreal-learner-0",
            "snapshots-pend-000-surreal-replay-0",
        ]
    )
    assert set(claims["pend-001"][0]).isdisjoint(claims["pend-000"][0])


def test_a_members_replay_is_laid_out_by_its_experiment(tmp_path):
    """The replay pods have neither the env nor torch: `surreal helm-values` resolves a member's layout as `surreal
    run` does (its env built once) and the chart carries it to the shards in the experiment; the base's own layout,
    for another env perhaps, never survives. An off-policy member's shards are laid out by it, an on-policy member's
    FIFO holds every chunk to it."""
    from surreal.algos import get_algorithm
    from surreal.config import algo_config, load_config
    from surreal.envs import env_spaces
    from surreal.proto.wire import fields_of

    base = tmp_path / "base.yaml"
    values = yaml.safe_load(BASE.read_text())
    values["experiment"]["replay"]["layout"] = {"obs": {"dtype": "float32", "shape": [999]}}
    base.write_text(yaml.safe_dump(values))
    [(release, path, _)] = write_values(["env=Pendulum-v1"], tmp_path / "v", "pend", base)
    experiment = experiment_of(template(release, path))
    cfg = load_config(["algo=ddpg", "env=Pendulum-v1"])
    assert fields_of(experiment["replay"]["layout"]) == get_algorithm("ddpg").chunk_fields(
        *env_spaces(cfg), algo_config(cfg)
    )
    [(release, path, _)] = write_values(
        ["algo=ppo", "env=Pendulum-v1", "replay.mode=fifo"], tmp_path / "p", "ppo", base
    )
    ppo = load_config(["algo=ppo", "env=Pendulum-v1"])
    assert fields_of(experiment_of(template(release, path))["replay"]["layout"]) == get_algorithm("ppo").chunk_fields(
        *env_spaces(ppo), algo_config(ppo)
    )


def test_a_base_whose_env_names_a_module_needs_import(tmp_path):
    values = yaml.safe_load(BASE.read_text())
    values["experiment"]["env"]["id"] = "pwnprobe:Pwn-v0"
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(values))
    with pytest.raises(ConfigError, match="--import pwnprobe"):
        write_values(["seed=1"], tmp_path / "v", "s", base)
    assert "pwnprobe" not in sys.modules and not (tmp_path / "v").exists()
