"""The chart's wiring, run for real: render values/smoke.yaml, take every workload's command, args and env exactly
as a pod gets them, rewrite only what a laptop cannot have (Service and pod DNS names -> 127.0.0.1 with a port per
pod, 0.0.0.0 -> 127.0.0.1, volume mount paths -> temp folders holding the ConfigMap's files), start one local
process per pod, and run the `helm test` pod's own command against them: it passes only once the learner makes
progress. This proves the chart's addresses, ports, config mount and commands agree with the runtime.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surreal.launch.local import free_ports
from test_chart import NAMESPACE, RELEASE, VALUES_DIR, by_kind, render

BIN = Path(sys.executable).parent  # `surreal` of this virtualenv: what the image's PATH gives
PROBE_TIMEOUT_S = 120.0
# `<name>.<namespace>.svc` (a Service) or `<pod>.<service>.<namespace>.svc` (a StatefulSet pod), then :port[:port]
DNS_WITH_PORTS = re.compile(r"(?P<host>[a-z0-9]([-a-z0-9.]*[a-z0-9])?\.svc)(?P<ports>(:[0-9]+)+)")


@dataclass
class Pod:
    """One pod the chart would create: its workload's container, and the local ports standing in for its own."""

    name: str
    labels: dict[str, str]
    spec: dict[str, Any]
    claims: set[str] = field(default_factory=set)  # a StatefulSet's volumeClaimTemplates: one volume per pod
    ports: dict[int, int] = field(default_factory=dict)  # containerPort -> local port

    @property
    def container(self) -> dict[str, Any]:
        (container,) = self.spec["containers"]
        return container


def expand_pods(docs: list[dict[str, Any]]) -> list[Pod]:
    """Every pod of every workload (StatefulSet pods by ordinal, Deployment replicas numbered) and the test pod."""
    pods = []
    for doc in docs:
        if doc["kind"] in ("StatefulSet", "Deployment"):
            template = doc["spec"]["template"]
            claims = {c["metadata"]["name"] for c in doc["spec"].get("volumeClaimTemplates", [])}
            for i in range(doc["spec"]["replicas"]):
                name = f"{doc['metadata']['name']}-{i}"
                pods.append(Pod(name, template["metadata"]["labels"], template["spec"], claims))
        elif doc["kind"] == "Pod":
            pods.append(Pod(doc["metadata"]["name"], doc["metadata"]["labels"], doc["spec"]))
    for pod, port in zip(
        [(p, cp["containerPort"]) for p in pods for cp in p.container.get("ports", [])],
        free_ports(sum(len(p.container.get("ports", [])) for p in pods)),
        strict=True,
    ):
        pod[0].ports[pod[1]] = port
    return pods


class ClusterDNS:
    """What the cluster's DNS and Services would do, as a port map: (DNS name, service port) -> local port."""

    def __init__(self, docs: list[dict[str, Any]], pods: list[Pod]) -> None:
        self.routes: dict[tuple[str, int], int] = {}
        for service in by_kind(docs, "Service"):
            name = service["metadata"]["name"]
            selector = service["spec"]["selector"]
            members = [p for p in pods if selector.items() <= p.labels.items() and p.ports]
            assert members, f"Service {name} selects no pod"
            for port in service["spec"]["ports"]:
                for pod in members:
                    target = self._container_port(pod, port["targetPort"])
                    if service["spec"].get("clusterIP") == "None":  # headless: every pod has a name of its own
                        self.routes[(f"{pod.name}.{name}.{NAMESPACE}.svc", port["port"])] = pod.ports[target]
                # The Service name itself: kube-proxy (or headless DNS) picks a pod; here, the first one.
                self.routes[(f"{name}.{NAMESPACE}.svc", port["port"])] = members[0].ports[
                    self._container_port(members[0], port["targetPort"])
                ]

    @staticmethod
    def _container_port(pod: Pod, target: int | str) -> int:
        for port in pod.container["ports"]:
            if target in (port["name"], port["containerPort"]):
                return int(port["containerPort"])
        raise AssertionError(f"pod {pod.name} has no port {target!r}")

    def rewrite(self, value: str) -> str:
        def local(match: re.Match[str]) -> str:
            host = match.group("host")
            ports = [int(p) for p in match.group("ports").lstrip(":").split(":")]
            missing = [p for p in ports if (host, p) not in self.routes]
            assert not missing, f"{host}:{missing} is no Service port of the release"
            return "127.0.0.1" + "".join(f":{self.routes[(host, p)]}" for p in ports)

        return DNS_WITH_PORTS.sub(local, value)


def local_command(
    pod: Pod, dns: ClusterDNS, configmaps: dict[str, dict[str, str]], root: Path
) -> tuple[list[str], dict[str, str], Path]:
    """argv, environment and working directory of `pod` as a local process."""
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
        else:
            assert (volume is not None and "emptyDir" in volume) or mount["name"] in pod.claims, mount
        mounts[mount["mountPath"]] = local

    def paths(value: str) -> str:
        for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if value == mount_path or value.startswith(mount_path + "/"):
                return str(local) + value[len(mount_path) :]
        return value

    own_ports = {str(cp): str(local) for cp, local in pod.ports.items()}
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOSTNAME": pod.name}
    for item in container.get("env", []):
        name, value = item["name"], item["value"]
        if name == "SURREAL_BIND_HOST":
            assert value == "0.0.0.0"
            value = "127.0.0.1"  # tests bind loopback only
        elif re.fullmatch(r"SURREAL_[A-Z_]+_PORT", name):
            value = own_ports[value]  # a port this pod opens: its local stand-in
        env[name] = paths(dns.rewrite(value))
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


def test_the_rendered_chart_runs_and_the_helm_test_sees_the_learner_progress(tmp_path: Path) -> None:
    docs = render(VALUES_DIR / "smoke.yaml")
    configmaps = {d["metadata"]["name"]: d["data"] for d in by_kind(docs, "ConfigMap")}
    pods = expand_pods(docs)
    dns = ClusterDNS(docs, pods)
    workloads = [p for p in pods if p.spec.get("restartPolicy") != "Never"]
    (probe,) = [p for p in pods if p.spec.get("restartPolicy") == "Never"]
    roles = sorted(p.labels["app.kubernetes.io/component"] for p in workloads)
    assert roles == ["actor", "actor", "learner", "ps", "ps", "replay", "replay"], roles

    procs: list[subprocess.Popen[bytes]] = []
    logs: dict[str, Path] = {}
    try:
        for pod in workloads:
            argv, env, cwd = local_command(pod, dns, configmaps, tmp_path)
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
    # The learner wrote its run folder where the chart mounts the checkpoint volume.
    (learner,) = [p for p in workloads if p.labels["app.kubernetes.io/component"] == "learner"]
    metrics = tmp_path / learner.name / "volumes" / "checkpoints" / "run" / "metrics.jsonl"
    assert metrics.exists() and metrics.read_text().count("\n") >= 2
    # Each actor ran under its own index, taken from its pod name's ordinal.
    for i in range(2):
        assert f"actor-{i} " in logs[f"{RELEASE}-surreal-actor-{i}"].read_text()
