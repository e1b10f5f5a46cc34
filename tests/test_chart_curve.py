"""The chart's CURVE keys (values `curve`, templates/curve-secret.yaml; docs/security.md): on by default, a Secret of
two fresh 32-byte keys mounted read-only in every role's pod and named by SURREAL_CURVE_DIR, a checksum that restarts
the roles when the keys change, off with one value, or a Secret of the user's.

What `helm template` cannot show offline, that an upgrade keeps the keys the release was installed with (Helm's
`lookup`), is rendered against a stand-in for the Kubernetes API (`FakeCluster`: the discovery documents Helm asks for
and the Secrets it looks up), with `helm template --dry-run=server`.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from surreal.proto.curve import CurveKeys
from surreal.settings import Settings
from test_chart import CHART, NAMESPACE, RELEASE, WORKLOAD_KINDS, by_kind, env_of, helm, render, run_helm

pytestmark = pytest.mark.infra  # needs helm, under .tools/

SECRET = f"{RELEASE}-surreal-curve"
MOUNT = "/etc/surreal-curve"
KEY_FILES = {"server.secret", "client.secret"}


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


def curve_volume(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((v for v in pod.get("volumes", []) if v["name"] == "curve"), None)


def checksums(docs: list[dict[str, Any]]) -> set[str | None]:
    return {w["spec"]["template"]["metadata"]["annotations"].get("checksum/curve") for w in workloads(docs)}


def secret_data(docs: list[dict[str, Any]]) -> dict[str, str]:
    (secret,) = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == SECRET]
    return secret["data"]


def test_every_role_mounts_the_charts_fresh_keys_by_default(tmp_path: Path) -> None:
    docs = render(sets=("experiment.learner.eval_interval=1000",))  # the evaluator too
    data = secret_data(docs)
    assert set(data) == KEY_FILES and all(len(base64.b64decode(v)) == 32 for v in data.values())
    assert data["server.secret"] != data["client.secret"]
    roles = set()
    for workload in workloads(docs):
        pod = workload["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        roles.add(workload["metadata"]["labels"]["app.kubernetes.io/component"])
        assert env_of(container)["SURREAL_CURVE_DIR"] == MOUNT
        assert {"name": "curve", "mountPath": MOUNT, "readOnly": True} in container["volumeMounts"]
        volume = curve_volume(pod)
        assert volume is not None and volume["secret"]["secretName"] == SECRET
        assert volume["secret"]["defaultMode"] == 0o440, "the pods' fsGroup reads the keys, nobody else"
        assert {item["key"] for item in volume["secret"]["items"]} == KEY_FILES
    assert roles == {"learner", "replay", "ps", "actor", "evaluator"}
    (checksum,) = checksums(docs)
    assert checksum, "one checksum of the keys on every role, so a rotation restarts them all"
    # The keys are what a role reads: written where the pod mounts them, they load.
    for name, text in data.items():
        (tmp_path / name).write_bytes(base64.b64decode(text))
    keys = Settings.from_env({"SURREAL_CURVE_DIR": str(tmp_path)}).curve_keys
    assert isinstance(keys, CurveKeys)
    # The helm test pod speaks only HTTP: no keys there.
    (probe,) = by_kind(docs, "Pod")
    assert curve_volume(probe["spec"]) is None


def test_each_install_makes_keys_of_its_own() -> None:
    assert secret_data(render()) != secret_data(render())


def test_curve_off_renders_no_secret_no_keys_and_no_checksum() -> None:
    docs = render(sets=("curve.enabled=false",))
    assert not by_kind(docs, "Secret")
    for workload in workloads(docs):
        pod = workload["spec"]["template"]["spec"]
        assert "SURREAL_CURVE_DIR" not in env_of(pod["containers"][0]) and curve_volume(pod) is None
    assert checksums(docs) == {None}


def test_a_secret_of_the_users_is_mounted_instead_of_one_of_the_charts() -> None:
    docs = render(sets=("curve.existingSecret=team-keys",))
    assert not by_kind(docs, "Secret")
    for workload in workloads(docs):
        volume = curve_volume(workload["spec"]["template"]["spec"])
        assert volume is not None and volume["secret"]["secretName"] == "team-keys"
    assert checksums(docs) == {None}, "offline, the user's Secret is not known: no checksum to render"


def test_a_bad_secret_name_is_refused_by_the_schema() -> None:
    done = run_helm("template", RELEASE, str(CHART), "--set", "curve.existingSecret=Team_Keys")
    assert done.returncode != 0 and "existingSecret" in done.stderr


# -- against a cluster: what `lookup` finds --------------------------------------------------------------------

# The API groups and kinds the chart renders (Helm maps every manifest to a resource before it renders the next).
RESOURCES = {
    "v1": ["Secret", "Service", "ServiceAccount", "ConfigMap", "Pod"],
    "apps/v1": ["StatefulSet", "Deployment"],
    "policy/v1": ["PodDisruptionBudget"],
    "networking.k8s.io/v1": ["NetworkPolicy"],
    "batch/v1": ["Job"],
    "rbac.authorization.k8s.io/v1": ["Role", "RoleBinding"],
}


class FakeCluster:
    """A Kubernetes API that answers discovery and GETs of the Secrets in `secrets` (name -> data), nothing else."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets = secrets
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                status, body = cluster.answer(self.path.split("?")[0])
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                del args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        groups = {gv.split("/")[0]: gv for gv in RESOURCES if "/" in gv}
        if path == "/version":
            return 200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            found = [{"name": g, "versions": [{"groupVersion": gv, "version": "v1"}]} for g, gv in groups.items()]
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": found}
        for gv, kinds in RESOURCES.items():
            if path == ("/api/v1" if gv == "v1" else f"/apis/{gv}"):
                listed = [
                    {
                        "name": k.lower() + "s",
                        "singularName": k.lower(),
                        "namespaced": True,
                        "kind": k,
                        "verbs": ["get"],
                    }
                    for k in kinds
                ]
                return 200, {"kind": "APIResourceList", "groupVersion": gv, "resources": listed}
        prefix = f"/api/v1/namespaces/{NAMESPACE}/secrets/"
        if path.startswith(prefix) and path[len(prefix) :] in self.secrets:
            name = path[len(prefix) :]
            owner = {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": NAMESPACE}  # the release's
            metadata = {"name": name, "labels": {"app.kubernetes.io/managed-by": "Helm"}, "annotations": owner}
            return 200, {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": self.secrets[name]}
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}

    def __enter__(self) -> FakeCluster:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def render(self, tmp_path: Path, *sets: str) -> list[dict[str, Any]]:
        """`helm template --dry-run=server` against this cluster: `lookup` sees its Secrets."""
        import subprocess

        import yaml

        kubeconfig = tmp_path / "kubeconfig"
        server = f"http://127.0.0.1:{self.server.server_port}"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": server}}],
                    "users": [{"name": "fake", "user": {}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=server"]
        args += ["--disable-openapi-validation", *(a for s in sets for a in ("--set", s))]
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
        done = subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120, check=False, env=env)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def stored(seed: bytes) -> dict[str, str]:
    return {name: base64.b64encode(seed * 32).decode() for name in sorted(KEY_FILES)}


@pytest.fixture
def installed() -> Iterator[FakeCluster]:
    """A cluster where the release was installed: its keys' Secret is there."""
    with FakeCluster({SECRET: stored(b"k")}) as cluster:
        yield cluster


def test_an_upgrade_keeps_the_keys_and_restarts_nothing(installed: FakeCluster, tmp_path: Path) -> None:
    first, second = installed.render(tmp_path), installed.render(tmp_path)
    assert secret_data(first) == secret_data(second) == stored(b"k")
    assert checksums(first) == checksums(second) and None not in checksums(first)


def test_new_keys_in_the_cluster_restart_every_role(installed: FakeCluster, tmp_path: Path) -> None:
    before = checksums(installed.render(tmp_path))
    installed.secrets[SECRET] = stored(b"r")  # rotated: the Secret deleted, an upgrade made new ones, ...
    after = checksums(installed.render(tmp_path))
    assert len(before) == len(after) == 1 and before != after


def test_the_users_secret_found_in_the_cluster_gets_a_checksum_too(tmp_path: Path) -> None:
    with FakeCluster({"team-keys": stored(b"t")}) as cluster:
        docs = cluster.render(tmp_path, "curve.existingSecret=team-keys")
        assert not by_kind(docs, "Secret")
        (checksum,) = checksums(docs)
        assert checksum
        cluster.secrets["team-keys"] = stored(b"u")
        assert checksums(cluster.render(tmp_path, "curve.existingSecret=team-keys")) != {checksum}
