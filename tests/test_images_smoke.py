"""images/smoke.py without a container engine: the rendered smoke chart turned into container specs and `run`
arguments (uid, read-only root, /tmp tmpfs, limits, loopback addresses), and the driver's promise to remove every
container it started and keep their logs when the run fails, checked against a stand-in engine that records its calls.
`make images-smoke` runs the real thing (CI, after `make test`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import smoke  # images/smoke.py (pytest's pythonpath)
from test_chart import HELM, helm

pytestmark = pytest.mark.infra  # needs podman and helm

ROLES = ["actor", "actor", "learner", "ps", "ps", "replay", "replay"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[smoke.ContainerSpec], smoke.ContainerSpec, str]:
    helm()  # says `make tools` when helm is missing
    root = tmp_path_factory.mktemp("smoke")
    return smoke.plan(smoke.render(str(HELM), "t1"), root, "run1")


def test_quantities() -> None:
    assert smoke.memory_bytes("512Mi") == 512 * 2**20 and smoke.memory_bytes("1Gi") == 2**30
    assert smoke.memory_bytes("1G") == 10**9 and smoke.memory_bytes(1000) == 1000
    assert smoke.cpus("500m") == 0.5 and smoke.cpus("1") == 1.0 and smoke.cpus(2) == 2.0
    with pytest.raises(ValueError):
        smoke.memory_bytes("1Qi")


def test_every_pod_becomes_a_locked_down_container_on_loopback(
    planned: tuple[list[smoke.ContainerSpec], smoke.ContainerSpec, str],
) -> None:
    specs, probe, metrics_url = planned
    assert sorted(s.pod.split("-surreal-")[1].rsplit("-", 1)[0] for s in specs) == ROLES
    images = {s.pod.split("-surreal-")[1].rsplit("-", 1)[0]: s.image for s in specs}
    # smoke.yaml runs the learner on the actor image (CPU torch); ps on the replay image.
    assert images == {
        "actor": "surreal-actor:t1",
        "learner": "surreal-actor:t1",
        "ps": "surreal-replay:t1",
        "replay": "surreal-replay:t1",
    }
    assert probe.image == "surreal-replay:t1" and probe.command == ["surreal", "probe", "progress"]
    assert probe.args[:2] == ["--url", metrics_url] and metrics_url.startswith("http://127.0.0.1:")
    own_ports: list[str] = []
    for spec in [*specs, probe]:
        assert spec.user == "10001:10001" and spec.read_only and spec.cap_drop == ["all"] and spec.no_new_privileges
        assert spec.workdir == "/tmp" and "/tmp" in spec.tmpfs
        assert spec.env["HOSTNAME"] == spec.pod or spec is probe
        assert not [v for v in [*spec.env.values(), *spec.args] if ".svc" in v or "0.0.0.0" in v]
        if spec is not probe:
            assert spec.env["SURREAL_BIND_HOST"] == "127.0.0.1"
            assert spec.command[:2] == ["surreal", "role"] and spec.cpus and spec.memory
            config = [m for m in spec.mounts if m.read_only and m.target != spec.env["SURREAL_CURVE_DIR"]]
            assert len(config) == 1 and Path(spec.env["SURREAL_CONFIG"]).parent == Path(config[0].target)
            assert (config[0].source / Path(spec.env["SURREAL_CONFIG"]).name).is_file()
            # The CURVE keys of the chart's Secret, decoded, read-only, readable by the pod's user alone.
            (keys,) = [m for m in spec.mounts if m.target == spec.env["SURREAL_CURVE_DIR"]]
            assert keys.read_only
            for name in ("server.secret", "client.secret"):
                key = keys.source / name
                assert len(key.read_bytes()) == 32 and key.stat().st_mode & 0o077 in (0o040, 0o044), name
            own_ports += [v for k, v in spec.env.items() if k.endswith("_PORT")]
    assert len(own_ports) == len(set(own_ports)), "every container port has a loopback port of its own"
    (learner,) = [s for s in specs if "learner" in s.pod]
    assert learner.args == ["--resume"] and learner.env["SURREAL_RUN_DIR"].startswith("/data/")
    assert [m.target for m in learner.mounts if not m.read_only] == ["/data"], "the checkpoint claim is a host folder"
    assert learner.memory == 2 * 2**30 and learner.cpus == 1.0


def test_run_arguments(planned: tuple[list[smoke.ContainerSpec], smoke.ContainerSpec, str]) -> None:
    specs, _, _ = planned
    (learner,) = [s for s in specs if "learner" in s.pod]
    args = smoke.run_args(learner, "run1")
    text = " ".join(args)
    assert args[:2] == ["--detach", "--name"] and args[2] == learner.name
    for expected in (
        "--network host",
        "--pull never",
        "--user 10001:10001",
        "--workdir /tmp",
        "--read-only --read-only-tmpfs=false",
        f"--tmpfs /tmp:rw,size={2**30},mode=1777",
        "--cap-drop all",
        "--security-opt no-new-privileges",
        "--cpus 1",
        f"--memory {2 * 2**30}",
        f"--label {smoke.LABEL}=run1",
        "--env SURREAL_BIND_HOST=127.0.0.1",
    ):
        assert expected in text, expected
    entrypoint = args.index("--entrypoint")
    assert args[entrypoint:] == ["--entrypoint", "surreal", "surreal-actor:t1", "role", "learner", "--resume"]
    assert "--cpus" not in smoke.run_args(learner, "run1", limits=False)
    docker = smoke.run_args(learner, "run1", podman=False)
    assert "--read-only" in docker and "--read-only-tmpfs=false" not in docker


FAKE_ENGINE = """#!{python}
import sys
from pathlib import Path
args = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if args[0] == "inspect":  # every workload runs; the probe exits 1
    print("exited 1" if args[-1].endswith("test-progress") else "running 0")
elif args[0] == "logs":
    print("log of " + args[-1])
"""


def test_a_failing_run_saves_every_log_and_removes_every_container(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    engine = tmp_path / "fake-engine"
    engine.write_text(FAKE_ENGINE.format(python=sys.executable, calls=str(calls)))
    engine.chmod(0o755)
    out = tmp_path / "out"
    rc = smoke.main(["--engine", str(engine), "--helm", str(HELM), "--tag", "t1", "--out", str(out)])
    assert rc == 1
    lines = calls.read_text().splitlines()
    started = [line.split()[3] for line in lines if line.startswith("run --detach --name")]
    assert len(started) == len(ROLES) + 1, "seven workloads and the probe"
    removed = {line.split()[-1] for line in lines if line.startswith("rm --force --time")}
    assert set(started) <= removed
    (run,) = out.iterdir()
    logs = sorted(p.name for p in run.glob("*.log"))
    assert len(logs) == len(ROLES) + 1 and all("log of" in (run / name).read_text() for name in logs)
    assert len(json.loads((run / "containers.json").read_text())) == len(ROLES) + 1
