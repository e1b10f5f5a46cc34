"""The pods a rendered chart would create, and what the cluster's DNS and Services would do for them, as plain data.

Shared by the chart's wiring test (tests/test_chart_wiring.py: every pod as a local process) and the images smoke
(images/smoke.py: every pod as a container on the host network): both give each pod's container ports a port of their
own on 127.0.0.1 and rewrite the release's DNS names to those ports.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

POD_INDEX = "apps.kubernetes.io/pod-index"
FIELD_LABEL = re.compile(r"metadata\.labels\['(?P<label>[^']+)'\]")
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

    @property
    def component(self) -> str:
        return self.labels.get("app.kubernetes.io/component", "")

    @property
    def is_test(self) -> bool:
        """The `helm test` pod: a one-shot Pod (restartPolicy Never), not a workload's replica."""
        return self.spec.get("restartPolicy") == "Never"


def expand_pods(docs: list[dict[str, Any]], free_ports: Callable[[int], list[int]]) -> list[Pod]:
    """Every pod of every workload (StatefulSet pods by ordinal, Deployment replicas numbered) and the test pod, each
    container port given one of `free_ports(n)`."""
    pods = []
    for doc in docs:
        if doc["kind"] in ("StatefulSet", "Deployment"):
            template = doc["spec"]["template"]
            claims = {c["metadata"]["name"] for c in doc["spec"].get("volumeClaimTemplates", [])}
            for i in range(doc["spec"]["replicas"]):
                name = f"{doc['metadata']['name']}-{i}"
                labels = dict(template["metadata"]["labels"])
                if doc["kind"] == "StatefulSet":  # the label the StatefulSet controller gives each pod (k8s >= 1.28)
                    labels[POD_INDEX] = str(i)
                pods.append(Pod(name, labels, template["spec"], claims))
        elif doc["kind"] == "Pod":
            pods.append(Pod(doc["metadata"]["name"], doc["metadata"]["labels"], doc["spec"]))
    wanted = [(p, cp["containerPort"]) for p in pods for cp in p.container.get("ports", [])]
    for (pod, container_port), port in zip(wanted, free_ports(len(wanted)), strict=True):
        pod.ports[container_port] = port
    return pods


class ClusterDNS:
    """What the cluster's DNS and Services would do, as a port map: (DNS name, service port) -> local port."""

    def __init__(self, docs: list[dict[str, Any]], pods: list[Pod], namespace: str) -> None:
        self.routes: dict[tuple[str, int], int] = {}
        for service in (d for d in docs if d["kind"] == "Service"):
            name = service["metadata"]["name"]
            selector = service["spec"]["selector"]
            members = [p for p in pods if selector.items() <= p.labels.items() and p.ports]
            if not members:
                raise ValueError(f"Service {name} selects no pod")
            for port in service["spec"]["ports"]:
                for pod in members:
                    target = self.container_port(pod, port["targetPort"])
                    if service["spec"].get("clusterIP") == "None":  # headless: every pod has a name of its own
                        self.routes[(f"{pod.name}.{name}.{namespace}.svc", port["port"])] = pod.ports[target]
                # The Service name itself: kube-proxy (or headless DNS) picks a pod; here, the first one.
                self.routes[(f"{name}.{namespace}.svc", port["port"])] = members[0].ports[
                    self.container_port(members[0], port["targetPort"])
                ]

    @staticmethod
    def container_port(pod: Pod, target: int | str) -> int:
        """The containerPort a Service's targetPort (a name or a number) names in `pod`."""
        for port in pod.container["ports"]:
            if target in (port["name"], port["containerPort"]):
                return int(port["containerPort"])
        raise ValueError(f"pod {pod.name} has no port {target!r}")

    def rewrite(self, value: str) -> str:
        """`value` with every `<host>.svc:<port>[:<port>]` of the release replaced by 127.0.0.1 and local ports."""

        def local(match: re.Match[str]) -> str:
            host = match.group("host")
            ports = [int(p) for p in match.group("ports").lstrip(":").split(":")]
            missing = [p for p in ports if (host, p) not in self.routes]
            if missing:
                raise ValueError(f"{host}:{missing} is no Service port of the release")
            return "127.0.0.1" + "".join(f":{self.routes[(host, p)]}" for p in ports)

        return DNS_WITH_PORTS.sub(local, value)

    def pod_env(self, pod: Pod) -> dict[str, str]:
        """The container's env as the pod gets it, made local: SURREAL_BIND_HOST 0.0.0.0 -> 127.0.0.1 (loopback only),
        SURREAL_*_PORT (a port the pod opens) -> its local stand-in, the release's DNS names -> 127.0.0.1:port."""
        own_ports = {str(cp): str(local) for cp, local in pod.ports.items()}
        env = {}
        for item in pod.container.get("env", []):
            name, value = item["name"], self.env_value(pod, item)
            if name == "SURREAL_BIND_HOST":
                if value != "0.0.0.0":
                    raise ValueError(f"{pod.name}: SURREAL_BIND_HOST is {value!r}, not 0.0.0.0")
                value = "127.0.0.1"
            elif re.fullmatch(r"SURREAL_[A-Z_]+_PORT", name):
                value = own_ports[value]
            env[name] = self.rewrite(value)
        if "MASTER_ADDR" in env:  # torchrun's rendezvous: a pod's DNS name and a port, in two variables
            host, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
            if (host, port) not in self.routes:
                raise ValueError(f"{pod.name}: MASTER_ADDR:MASTER_PORT {host}:{port} is no Service port of the release")
            env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(self.routes[(host, port)])
        return env

    @staticmethod
    def env_value(pod: Pod, item: dict[str, Any]) -> str:
        """An env entry's value: `value`, or what the downward API gives (the pod's name or one of its labels)."""
        if "value" in item:
            return str(item["value"])
        path = item["valueFrom"]["fieldRef"]["fieldPath"]
        if path == "metadata.name":
            return pod.name
        match = FIELD_LABEL.fullmatch(path)
        if match is None or match.group("label") not in pod.labels:
            raise ValueError(f"{pod.name}: {item['name']} comes from {path!r}, which this pod does not have")
        return pod.labels[match.group("label")]
