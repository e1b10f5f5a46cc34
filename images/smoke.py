"""`make images-smoke`: the smoke topology (infra/helm/values/smoke.yaml) as containers of the images just built.

The chart is rendered with `helm template` and every pod becomes one container exactly as Kubernetes would run it:
the rendered command and args, the SURREAL_* env, the pod's uid/gid, a read-only root filesystem, a tmpfs at /tmp
(its emptyDir), the ConfigMap mounted read-only, the learner's checkpoint claim as a host folder, all capabilities
dropped, no privilege escalation, and the CPU and memory limits where the engine can enforce them. What a laptop
has no cluster for is rewritten as in tests/test_chart_wiring.py (infra/helm/chart_pods.py): the containers share
the host network, each container port gets a free port on 127.0.0.1, the release's DNS names point there, and every
role binds 127.0.0.1 only.

Then the `helm test` pod's own command runs as a container until it passes (bounded), the learner container is
killed (SIGKILL) and started again, and it must resume from its checkpoint and make progress. Every container's log
is saved under the run folder and every container this run started is removed, pass or fail.

    python images/smoke.py --engine podman --helm .tools/bin/helm --tag smoke --out build/images-smoke
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from surreal.commands.probe import read_learner
from surreal.launch.local import free_ports

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "infra" / "helm"))
from chart_pods import ClusterDNS, Pod, expand_pods  # noqa: E402  (infra/helm/chart_pods.py, shared with the wiring test)

CHART = REPO / "infra" / "helm" / "surreal-chart"
SMOKE_VALUES = REPO / "infra" / "helm" / "values" / "smoke.yaml"
RELEASE = "smoke"
NAMESPACE = "surreal"
LABEL = "dev.surreal.images-smoke"  # every container this driver starts carries it, valued with the run's id

_QUANTITY = re.compile(r"^(?P<number>[0-9.]+)(?P<suffix>[a-zA-Z]*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def memory_bytes(quantity: str | int) -> int:
    """A Kubernetes memory quantity (512Mi, 1Gi, 1G, 1000) in bytes."""
    match = _QUANTITY.match(str(quantity))
    if not match or match.group("suffix") not in {**_BINARY, **_DECIMAL}:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    scale = {**_BINARY, **_DECIMAL}[match.group("suffix")]
    return int(float(match.group("number")) * scale)


def cpus(quantity: str | int | float) -> float:
    """A Kubernetes CPU quantity (500m, 1, "1.5") in CPUs."""
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


@dataclass(frozen=True)
class Mount:
    """A host path bind-mounted into the container."""

    source: Path
    target: str
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    """One pod as one container: everything `run_args` turns into an engine command line."""

    name: str  # the container's name (prefixed with the run's id)
    pod: str  # the pod's name, also its HOSTNAME (roles read their ordinal from it)
    image: str
    command: list[str]
    args: list[str]
    env: dict[str, str]
    user: str  # uid:gid
    workdir: str
    read_only: bool
    tmpfs: dict[str, int]  # mount path -> size limit in bytes
    mounts: list[Mount] = field(default_factory=list)
    cap_drop: list[str] = field(default_factory=list)
    no_new_privileges: bool = False
    cpus: float | None = None
    memory: int | None = None


def write_secret(folder: Path, volume: dict[str, Any], data: dict[str, str], uid: int, gid: int) -> None:
    """A Secret volume's items into `folder` as the kubelet writes them: decoded, at the volume's `defaultMode`, owned
    by the pod's user and fsGroup (so a 0440 key is readable by the pod and nobody else). Rootless, the pod's ids are
    mapped to subordinate ones: the files are then world-readable in the run's own folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in volume["items"]:
        path = folder / item["path"]
        path.write_bytes(base64.b64decode(data[item["key"]]))
        if os.geteuid() == 0:
            shutil.chown(path, uid, gid)
            path.chmod(volume.get("defaultMode", 0o644))
        else:
            path.chmod(0o444)


def container_spec(
    pod: Pod,
    dns: ClusterDNS,
    configmaps: dict[str, dict[str, str]],
    root: Path,
    prefix: str,
    secrets: dict[str, dict[str, str]] | None = None,
) -> ContainerSpec:
    """`pod` as a container on the host network: its rendered command, args, env (made local by `dns`), security
    context and limits; ConfigMap and Secret files and claim folders are written under `root/<pod>`."""
    secrets = secrets or {}
    container = pod.container
    pod_security = pod.spec.get("securityContext", {})
    security = {**pod_security, **container.get("securityContext", {})}
    if not security.get("runAsNonRoot") or not security.get("runAsUser"):
        raise ValueError(f"{pod.name}: the chart must run it as a non-root uid")
    uid = int(security["runAsUser"])
    gid = int(security.get("runAsGroup", pod_security.get("runAsGroup", uid)))
    volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
    mounts: list[Mount] = []
    tmpfs: dict[str, int] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        host = root / pod.name / mount["name"]
        if volume is not None and "configMap" in volume:
            host.mkdir(parents=True, exist_ok=True)
            for key, text in configmaps[volume["configMap"]["name"]].items():
                (host / key).write_text(text)
                (host / key).chmod(0o644)
            mounts.append(Mount(host, mount["mountPath"], read_only=True))
        elif volume is not None and "emptyDir" in volume:
            tmpfs[mount["mountPath"]] = memory_bytes(volume["emptyDir"].get("sizeLimit", "64Mi"))
        elif volume is not None and "secret" in volume:
            fs_group = int(pod_security.get("fsGroup", gid))
            write_secret(host, volume["secret"], secrets[volume["secret"]["secretName"]], uid, fs_group)
            mounts.append(Mount(host, mount["mountPath"], read_only=True))
        elif mount["name"] in pod.claims:
            mounts.append(Mount(host, mount["mountPath"], read_only=bool(mount.get("readOnly"))))
        else:
            raise ValueError(f"{pod.name}: volume {mount['name']} is no ConfigMap, Secret, emptyDir or claim")
    env = {"HOSTNAME": pod.name, **dns.pod_env(pod)}
    argv = [dns.rewrite(a) for a in [*container["command"], *container.get("args", [])]]
    leftover = [v for v in [*env.values(), *argv] if ".svc" in v]
    if leftover:
        raise ValueError(f"{pod.name}: unrewritten cluster names: {leftover}")
    limits = container.get("resources", {}).get("limits", {})
    return ContainerSpec(
        name=f"{prefix}-{pod.name}",
        pod=pod.name,
        image=container["image"],
        command=argv[: len(container["command"])],
        args=argv[len(container["command"]) :],
        env=env,
        user=f"{uid}:{gid}",
        workdir=container.get("workingDir", "/"),
        read_only=bool(security.get("readOnlyRootFilesystem")),
        tmpfs=tmpfs,
        mounts=mounts,
        cap_drop=[c.lower() for c in security.get("capabilities", {}).get("drop", [])],
        no_new_privileges=security.get("allowPrivilegeEscalation") is False,
        cpus=cpus(limits["cpu"]) if "cpu" in limits else None,
        memory=memory_bytes(limits["memory"]) if "memory" in limits else None,
    )


def run_args(spec: ContainerSpec, label: str, limits: bool = True, podman: bool = True) -> list[str]:
    """`<engine> run` arguments (after `run`) that start `spec` detached on the host network (podman's, or docker's
    where they differ)."""
    args = ["--detach", "--name", spec.name, "--label", f"{LABEL}={label}", "--network", "host", "--pull", "never"]
    args += ["--user", spec.user, "--workdir", spec.workdir]
    if spec.read_only:
        args += ["--read-only"]
        if podman:  # podman's --read-only adds tmpfs at /run, /tmp and /var/tmp unless told not to; docker's does not
            args += ["--read-only-tmpfs=false"]  # writable: only the pod's own volumes
    for path, size in sorted(spec.tmpfs.items()):
        args += ["--tmpfs", f"{path}:rw,size={size},mode=1777"]
    for mount in spec.mounts:
        args += ["--volume", f"{mount.source}:{mount.target}:{'ro' if mount.read_only else 'rw'}"]
    for cap in spec.cap_drop:
        args += ["--cap-drop", cap]
    if spec.no_new_privileges:
        args += ["--security-opt", "no-new-privileges"]
    if limits and spec.cpus is not None:
        args += ["--cpus", f"{spec.cpus:g}"]
    if limits and spec.memory is not None:
        args += ["--memory", str(spec.memory)]
    for name, value in spec.env.items():
        args += ["--env", f"{name}={value}"]
    args += ["--entrypoint", spec.command[0], spec.image, *spec.command[1:], *spec.args]
    return args


def render(helm: str, tag: str, values: Path = SMOKE_VALUES) -> list[dict[str, Any]]:
    """The chart rendered with `values`, every image tagged `tag` (local names: no registry)."""
    done = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "-f", str(values), "--namespace", NAMESPACE]
        + ["--set-string", f"image.tag={tag}", "--set-string", "image.registry="],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


class Engine:
    """The container engine's CLI (podman or docker), every call bounded in time."""

    def __init__(self, command: str, say: Callable[[str], None] = print) -> None:
        self.command = command
        self.say = say
        self.podman = Path(command).name != "docker"

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.command, *args], capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.command} {' '.join(args[:3])} ... failed ({done.returncode}):\n{done.stderr}")
        return done

    def status(self, name: str) -> tuple[str, int]:
        """(state, exit code) of a container: running, exited, ... or missing."""
        done = self("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name, check=False)
        if done.returncode != 0:
            return "missing", -1
        state, code = done.stdout.split()
        return state, int(code)

    def save_log(self, name: str, path: Path) -> None:
        done = self("logs", name, check=False, timeout=60)
        path.write_text(done.stdout + done.stderr)


class SmokeFailure(Exception):
    """The smoke topology did not do what the chart promises."""


@dataclass
class Smoke:
    """One run: the rendered pods as container specs, the containers started, and where their logs go."""

    engine: Engine
    out: Path
    specs: list[ContainerSpec]
    probe: ContainerSpec
    label: str
    limits: bool = True
    started: list[str] = field(default_factory=list)
    say: Callable[[str], None] = print

    def start(self, spec: ContainerSpec) -> None:
        self.engine("rm", "--force", spec.name, check=False)
        self.started.append(spec.name)
        self.engine("run", *run_args(spec, self.label, self.limits, self.engine.podman))

    def check_running(self) -> None:
        for spec in self.specs:
            state, code = self.engine.status(spec.name)
            if state != "running":
                raise SmokeFailure(f"{spec.pod} is {state} (exit {code}): see {self.out / (spec.pod + '.log')}")

    def wait_for_probe(self, timeout_s: float) -> None:
        """Run the `helm test` pod's command as a container until it exits: it must exit 0 within `timeout_s`."""
        self.start(self.probe)
        deadline = time.monotonic() + timeout_s
        while True:
            state, code = self.engine.status(self.probe.name)
            if state == "exited":
                if code != 0:
                    raise SmokeFailure(f"the helm test probe failed (exit {code})")
                return
            self.check_running()
            if time.monotonic() > deadline:
                raise SmokeFailure(f"the helm test probe still waiting after {timeout_s:g} s")
            time.sleep(2)

    def restart_learner(self, metrics_url: str, timeout_s: float) -> tuple[int, float]:
        """SIGKILL the learner's container, start it again on the same checkpoint folder, and wait until it says it
        resumed and its updates pass the resumed count: (resumed update, updates seen)."""
        (learner,) = [s for s in self.specs if s.pod.endswith("learner-0")]
        before = read_learner(metrics_url).get("updates", 0.0)
        self.engine("kill", "--signal", "KILL", learner.name)
        self.engine.save_log(learner.name, self.out / f"{learner.pod}.before-kill.log")
        self.say(f"killed {learner.pod} at {before:g} updates; starting it again")
        self.start(learner)
        deadline = time.monotonic() + timeout_s
        resumed: int | None = None
        while time.monotonic() < deadline:
            self.check_running()
            logs = self.engine("logs", learner.name, check=False)
            log = logs.stdout + logs.stderr
            if "no checkpoint restores, starting fresh" in log:
                raise SmokeFailure("the restarted learner found no checkpoint and started fresh")
            found = re.search(r"resumed at update (\d+)", log)
            if found:
                resumed = int(found.group(1))
                try:
                    updates = read_learner(metrics_url).get("updates", 0.0)
                except (OSError, urllib.error.URLError, ValueError):
                    updates = -1.0
                if updates < resumed and updates >= 0:
                    raise SmokeFailure(f"the learner went back: {updates:g} updates after resuming at {resumed}")
                if updates > resumed:
                    return resumed, updates
            time.sleep(2)
        raise SmokeFailure(f"the learner did not resume and progress within {timeout_s:g} s (resumed: {resumed})")

    def cleanup(self) -> None:
        """Save every container's log, then remove every container this run started (and any left with its label)."""
        for name in dict.fromkeys(self.started):
            pod = name.removeprefix(f"{self.label}-")
            self.engine.save_log(name, self.out / f"{pod}.log")
        listed = self.engine("ps", "--all", "--quiet", "--filter", f"label={LABEL}={self.label}", check=False)
        for name in [*dict.fromkeys(self.started), *listed.stdout.split()]:
            self.engine("rm", "--force", "--time", "5", name, check=False, timeout=60)
        left = self.engine("ps", "--all", "--quiet", "--filter", f"label={LABEL}={self.label}", check=False)
        if left.stdout.strip():
            raise SmokeFailure(f"containers left behind: {left.stdout.split()}")


def limits_supported(engine: Engine, image: str) -> bool:
    """Whether the engine can enforce CPU and memory limits here (rootless podman on cgroup v1 cannot)."""
    done = engine(
        "run", "--rm", "--pull", "never", "--network", "host", "--cpus", "0.5", "--memory", str(64 * 2**20),
        "--entrypoint", "python", image, "-c", "pass",
        check=False, timeout=120,
    )  # fmt: skip
    return done.returncode == 0


@contextmanager
def terminated_as_exceptions() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, so `finally` cleans up when make or CI stops the run."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def plan(docs: list[dict[str, Any]], root: Path, prefix: str) -> tuple[list[ContainerSpec], ContainerSpec, str]:
    """The workloads' container specs, the probe's, and the learner's metrics URL on loopback."""
    configmaps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    secrets = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "Secret"}  # the CURVE keys
    pods = expand_pods(docs, free_ports)
    dns = ClusterDNS(docs, pods, NAMESPACE)
    specs = [container_spec(p, dns, configmaps, root, prefix, secrets) for p in pods if not p.is_test]
    (probe,) = [container_spec(p, dns, configmaps, root, prefix, secrets) for p in pods if p.is_test]
    (learner,) = [p for p in pods if p.component == "learner"]
    metrics = learner.ports[ClusterDNS.container_port(learner, "metrics")]
    return specs, probe, f"http://127.0.0.1:{metrics}/metrics"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--engine", default="podman", help="podman or docker (default podman)")
    parser.add_argument("--helm", default=str(REPO / ".tools" / "bin" / "helm"))
    parser.add_argument("--tag", required=True, help="the images' tag (make images IMAGE_TAG)")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "images-smoke", help="logs go to OUT/<run id>/")
    parser.add_argument("--probe-timeout-s", type=float, default=420.0)
    parser.add_argument("--resume-timeout-s", type=float, default=240.0)
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"[images-smoke] {line}", flush=True)

    label = f"surreal-smoke-{time.strftime('%Y%m%d-%H%M%S')}"
    out = (args.out / label).resolve()
    out.mkdir(parents=True)
    engine = Engine(args.engine, say)
    specs, probe, metrics_url = plan(render(args.helm, args.tag), out / "volumes", label)
    for spec in specs:  # the claim folders: owned by the pod's uid, as fsGroup makes a PVC writable for it
        for mount in spec.mounts:
            if not mount.read_only:
                mount.source.mkdir(parents=True, exist_ok=True)
                if os.geteuid() == 0:
                    uid, gid = (int(x) for x in spec.user.split(":"))
                    shutil.chown(mount.source, uid, gid)
                else:  # rootless: the pod's uid is mapped to a subordinate id
                    mount.source.chmod(0o777)
    (out / "containers.json").write_text(
        json.dumps([run_args(s, label, podman=engine.podman) for s in [*specs, probe]], indent=1)
    )
    limits = limits_supported(engine, probe.image)
    say(f"run {label}: {len(specs)} containers + the helm test probe; logs in {out}")
    if not limits:
        say("this engine cannot enforce CPU/memory limits here: the containers run without them")
    smoke = Smoke(engine, out, specs, probe, label, limits, say=say)
    started = time.monotonic()
    failure: BaseException | None = None
    with terminated_as_exceptions():
        try:
            for spec in specs:
                smoke.start(spec)
                say(f"started {spec.pod} ({spec.image}: {' '.join(spec.command + spec.args)})")
            smoke.wait_for_probe(args.probe_timeout_s)
            say(f"helm test probe passed after {time.monotonic() - started:.0f} s")
            smoke.check_running()
            resumed, updates = smoke.restart_learner(metrics_url, args.resume_timeout_s)
            say(f"the learner resumed at update {resumed} and went on to {updates:g} updates")
            smoke.check_running()
        except (Exception, KeyboardInterrupt) as exc:  # any failure: reported after the cleanup, exit 1
            failure = exc
        finally:
            try:
                smoke.cleanup()
            except SmokeFailure as exc:
                failure = failure or exc
    if failure is not None:
        say(f"FAILED: {type(failure).__name__}: {failure}")
        for log in sorted(out.glob("*.log")):
            say(f"--- {log.name} (last lines)\n" + "\n".join(log.read_text().splitlines()[-15:]))
        return 1
    say(f"passed in {time.monotonic() - started:.0f} s; every container removed; logs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
