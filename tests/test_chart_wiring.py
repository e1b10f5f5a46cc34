"""The chart's wiring, run for real: render values/smoke.yaml, take every workload's command, args and env exactly
as a pod gets them, rewrite only what a laptop cannot have (Service and pod DNS names -> 127.0.0.1 with a port per
pod, 0.0.0.0 -> 127.0.0.1, volume mount paths -> temp folders holding the ConfigMap's files), start one local
process per pod, and run the `helm test` pod's own command against them: it passes only once the learner makes
progress. This proves the chart's addresses, ports, config mount and commands agree with the runtime, and that the
CURVE keys the chart makes and mounts (on by default) are ones every role reads and agrees on: a role that refused its
peers would never let the learner progress.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import surreal
from chart_pods import ClusterDNS, Pod, expand_pods  # infra/helm/chart_pods.py (pytest's pythonpath)
from surreal.launch.local import free_ports
from test_chart import NAMESPACE, RELEASE, VALUES_DIR, by_kind, render

pytestmark = pytest.mark.infra  # needs helm, under .tools/

BIN = Path(sys.executable).parent  # `surreal` of this virtualenv: what the image's PATH gives
# The package the test itself imports, first on the roles' path too: a virtualenv's editable install may point at
# another checkout of the repository than the one under test.
SOURCE = str(Path(surreal.__file__).resolve().parents[1])
PROBE_TIMEOUT_S = 300.0  # catches a hang only: four roles start and learn on a 2-core box that may be busy


def local_command(
    pod: Pod,
    dns: ClusterDNS,
    configmaps: dict[str, dict[str, str]],
    root: Path,
    secrets: dict[str, dict[str, str]] | None = None,
) -> tuple[list[str], dict[str, str], Path]:
    """argv, environment and working directory of `pod` as a local process (`secrets`: the rendered Secrets' data,
    written into a Secret volume's folder as the kubelet writes it: decoded, one file per item)."""
    container = pod.container
    pod_root = root / pod.name
    volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        local = pod_root / "volumes" / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        volume = volumes.get(mount["name"])
        if volume is not None and "configMap" in volume:
            for key, text in configmaps[volume["configMap"]["name"]].items():
                (local / key).write_text(text)
        elif volume is not None and "secret" in volume:
            data = (secrets or {})[volume["secret"]["secretName"]]
            for item in volume["secret"]["items"]:
                (local / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
                (local / item["path"]).chmod(volume["secret"]["defaultMode"])
        else:
            assert (volume is not None and "emptyDir" in volume) or mount["name"] in pod.claims, mount
        mounts[mount["mountPath"]] = local

    def paths(value: str) -> str:
        for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if value == mount_path or value.startswith(mount_path + "/"):
                return str(local) + value[len(mount_path) :]
        return value

    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOSTNAME": pod.name, "PYTHONPATH": SOURCE}
    env.update({name: paths(value) for name, value in dns.pod_env(pod).items()})  # loopback only, local ports
    argv = [paths(dns.rewrite(arg)) for arg in [*container["command"], *container.get("args", [])]]
    assert (BIN / argv[0]).exists(), f"{argv[0]} is not installed in {BIN}"
    argv[0] = str(BIN / argv[0])
    leftover = [v for v in [*env.values(), *argv] if ".svc" in v]
    assert not leftover, f"unrewritten cluster names: {leftover}"
    return argv, env, Path(paths(container["workingDir"]))


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process group, then SIGKILL whatever is left after 15 s."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def run_chart(tmp_path: Path, sets: tuple[str, ...], roles: list[str]) -> tuple[list[Pod], dict[str, Path]]:
    """Render values/smoke.yaml with `sets`, run its pods (whose components must be `roles`) and the `helm test`
    probe until the probe passes; every process is stopped after. The pods and their logs."""
    docs = render(VALUES_DIR / "smoke.yaml", sets=sets)
    configmaps = {d["metadata"]["name"]: d["data"] for d in by_kind(docs, "ConfigMap")}
    secrets = {d["metadata"]["name"]: d["data"] for d in by_kind(docs, "Secret")}
    assert secrets, "the chart makes the CURVE keys' Secret by default"
    pods = expand_pods(docs, free_ports)
    dns = ClusterDNS(docs, pods, NAMESPACE)
    workloads = [p for p in pods if p.spec.get("restartPolicy") != "Never"]
    (probe,) = [p for p in pods if p.spec.get("restartPolicy") == "Never"]
    assert sorted(p.labels["app.kubernetes.io/component"] for p in workloads) == roles

    procs: list[subprocess.Popen[bytes]] = []
    logs: dict[str, Path] = {}
    try:
        for pod in workloads:
            argv, env, cwd = local_command(pod, dns, configmaps, tmp_path, secrets)
            assert "SURREAL_CURVE_DIR" in env, pod.name
            logs[pod.name] = tmp_path / f"{pod.name}.log"
            with logs[pod.name].open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        argv, env, cwd = local_command(probe, dns, configmaps, tmp_path)
        probe_log = tmp_path / "helm-test.log"
        with probe_log.open("wb") as log:
            checker = subprocess.Popen(
                [*argv, "--interval-s", "1"],
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(checker)

        def tails() -> str:
            return "\n".join(f"--- {name}\n{path.read_text()[-1500:]}" for name, path in logs.items())

        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while checker.poll() is None:
            crashed = {pod.name: proc.returncode for pod, proc in zip(workloads, procs, strict=False) if proc.poll()}
            assert not crashed, f"roles exited: {crashed}\n{tails()}"
            assert time.monotonic() < deadline, f"helm test probe still waiting after {PROBE_TIMEOUT_S} s\n{tails()}"
            time.sleep(0.5)
        output = probe_log.read_text()
        assert checker.returncode == 0, f"helm test probe failed:\n{output}\n{tails()}"
        assert "progress:" in output
        still_running = [pod.name for pod, proc in zip(workloads, procs, strict=False) if proc.poll() is not None]
        assert not still_running, f"roles exited: {still_running}\n{tails()}"
    finally:
        stop(procs)
    return workloads, logs


def test_the_rendered_chart_runs_and_the_helm_test_sees_the_learner_progress(tmp_path: Path) -> None:
    roles = ["actor", "actor", "learner", "ps", "ps", "replay", "replay"]
    workloads, logs = run_chart(tmp_path, (), roles)
    # The learner wrote its run folder where the chart mounts the checkpoint volume.
    (learner,) = [p for p in workloads if p.labels["app.kubernetes.io/component"] == "learner"]
    metrics = tmp_path / learner.name / "volumes" / "checkpoints" / "run" / "metrics.jsonl"
    assert metrics.exists() and metrics.read_text().count("\n") >= 2
    # The replay shards and ps served over CURVE, with the keys of the chart's Secret.
    for pod in workloads:
        if pod.labels["app.kubernetes.io/component"] in ("replay", "ps"):
            assert " over CURVE," in logs[pod.name].read_text(), pod.name
    # Each actor ran under its own index, taken from its pod name's ordinal.
    for i in range(2):
        assert f"actor-{i} " in logs[f"{RELEASE}-surreal-actor-{i}"].read_text()


@pytest.mark.slow
def test_a_learner_group_from_the_chart_trains_as_one_and_the_helm_test_sees_rank_0_progress(tmp_path: Path) -> None:
    """learner.replicas=2: two learner pods, ranked by their pod index, meet at pod 0's rendezvous port and train
    together; the ps and the probe follow pod 0."""
    roles = ["actor", "actor", "learner", "learner", "ps", "ps", "replay", "replay"]
    workloads, logs = run_chart(tmp_path, ("learner.replicas=2",), roles)
    rank_1 = logs[f"{RELEASE}-surreal-learner-1"].read_text()
    assert "rank 1 of 2 joined the learner group" in rank_1 and "rank 1: 1 updates" in rank_1, rank_1
    assert "rank 0 of a learner group of 2" in logs[f"{RELEASE}-surreal-learner-0"].read_text()
    metrics = tmp_path / f"{RELEASE}-surreal-learner-0" / "volumes" / "checkpoints" / "run" / "metrics.jsonl"
    assert metrics.exists() and metrics.read_text().count("\n") >= 2
    assert not (
        tmp_path / f"{RELEASE}-surreal-learner-1" / "volumes" / "checkpoints" / "run" / "metrics.jsonl"
    ).exists()


@pytest.mark.slow
def test_central_inference_from_the_chart_acts_for_the_actors_and_the_helm_test_sees_the_learner_progress(
    tmp_path: Path,
) -> None:
    """inference.replicas=2: two worker pods follow the ps, the actors (topology.inference=central, so they have no
    policy of their own) reach them through the pod DNS names in SURREAL_INFERENCE_ADDRS, and the learner makes
    progress on what the actors collected with the workers' actions."""
    roles = ["actor", "actor", "inference", "inference", "learner", "ps", "ps", "replay", "replay"]
    workloads, logs = run_chart(tmp_path, ("inference.replicas=2",), roles)
    batches = 0
    for i in range(2):
        log = logs[f"{RELEASE}-surreal-inference-{i}"].read_text()
        assert "ppo inference for InvertedPendulum-v5" in log and " over CURVE," in log, log
        (served,) = re.findall(r"stopped by SIGTERM .*: (\d+) batches at version", log)
        batches += int(served)  # each actor starts at its own worker, but may fail over while one starts
    assert batches > 0, "the workers never acted for the actors"
