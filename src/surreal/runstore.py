"""Run folders in object storage: the local run folder as a cache of `s3://`, `gs://` or `az://` (fsspec).

    surreal run algo=ddpg env=Pendulum-v1 name=pend run_uri=s3://my-bucket/runs   # mirrored at s3://my-bucket/runs/pend
    surreal run --resume s3://my-bucket/runs/pend                                   # on any machine, from the bucket
    surreal plot s3://my-bucket/runs/pend
    surreal eval s3://my-bucket/runs/pend

Every process keeps writing its run folder on local disk exactly as without a bucket (atomic renames, appends), and
each writer mirrors the files it owns (`Part`): the learner its checkpoints, policy, metrics, TensorBoard and
config at every checkpoint, each replay shard its snapshots whenever it writes one, the evaluator its rows and
best policy, the launcher its summary at the end. A role that starts on a folder missing what it needs (a pod on
a new node, a deleted folder, a new release) pulls it first; what is on local disk is newer than the bucket or
the same, so a file present locally is kept.

What a reader can trust. An object store's write is all-or-nothing already (an S3 PUT or completed multipart
upload, a GCS upload, an Azure block list commit): no reader sees half an object, so a file is uploaded straight
to its key (a temporary key and a copy would move every byte twice for nothing). What the store does not give is
a consistent set of files, nor a way to tell a file of the run from one a crashed upload left behind. So each
writer uploads its files first and then its manifest, `<run>/.surreal/manifests/<part>.json`: every file it
holds with its size and SHA-256. A reader takes only files a manifest lists, downloads each to a temporary name,
and renames it into place only when its size and hash are the manifest's; a file changed or replaced since (a
newer upload under the same name) is fetched again under the newer manifest or left out, never half-trusted.
Files a writer dropped locally (rotated checkpoints, old snapshots) are deleted from the bucket only after the
manifest that no longer lists them is written.

fsspec and its backends (s3fs, gcsfs, adlfs: the cloud extra) are imported only when a bucket
is used, so the torch-free roles need nothing more without one. Credentials come from each backend's usual
chain: environment variables, a profile, or the pod's workload identity (IRSA, GKE Workload Identity, Azure
workload identity); `AWS_ENDPOINT_URL` points s3fs at another S3 server.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from surreal.boundedjson import JsonBounds, JsonBoundsError, loads
from surreal.errors import install_extra
from surreal.metrics import RoleMetrics

# URI scheme -> the fsspec backend (and its PyPI package) that serves it.
SCHEMES = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}
MANIFEST_DIR = ".surreal/manifests"  # in the bucket's run folder
MANIFEST_FORMAT = "surreal-run-manifest"
MANIFEST_VERSION = 1
# A manifest lists a run folder's files (a few hundred: checkpoints, logs, TensorBoard events, snapshots); read from
# a bucket anyone with access may have written, it is bounded before it is parsed (surreal/boundedjson.py).
MANIFEST_JSON = JsonBounds(16 << 20, max_depth=8, max_items=1 << 20, max_string=4096)
CHUNK = 8 << 20  # bytes read, hashed and uploaded at a time
PULL_TRIES = 3  # a file that changed under a manifest: read the newer manifest and try again this often
SET_ASIDE = (".corrupt", ".foreign")  # suffixes a role renames a file it refused to: not pulled again
INSTALL_HINT = install_extra("cloud")

log = logging.getLogger("surreal.runstore")


class StorageError(Exception):
    """A bucket that cannot be used (unknown scheme, backend not installed, unreachable, denied): one line."""


def describe(exc: BaseException) -> str:
    """`Type: the first line of its message`: a backend's error (they raise many types) as one line."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


# -- URIs ---------------------------------------------------------------------------------------------------------


def is_uri(where: object) -> bool:
    """Whether `where` names a run folder in object storage (`s3://...`) rather than a local path."""
    return isinstance(where, str) and "://" in where


def uri_problem(uri: str) -> str | None:
    """Why `uri` cannot hold run folders (None: it can): a known scheme and a bucket (container) name."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in SCHEMES:
        return f"{uri!r} is not an object-storage URI: use s3://BUCKET/PATH, gs://BUCKET/PATH or az://CONTAINER/PATH"
    if not rest.split("/", 1)[0]:
        return f"{uri!r} names no bucket"
    return None


def join(uri: str, *parts: str) -> str:
    """`uri` with `parts` appended, one `/` between each."""
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts if p.strip("/"))])


def run_name_of(uri: str) -> str:
    """The run folder's name: the last part of its URI."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


def cache_dir(uri: str) -> Path:
    """Where read-only commands (`surreal plot`, `surreal eval`) keep a bucket's run folder: `$SURREAL_CACHE_DIR`,
    else `$XDG_CACHE_HOME/surreal`, else `~/.cache/surreal`, then `<scheme>/<bucket>/<path>`."""
    root = os.environ.get("SURREAL_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "surreal"
    )
    scheme, _, rest = uri.rstrip("/").partition("://")
    return Path(root, scheme, *[p for p in rest.split("/") if p not in ("", ".", "..")])


# -- what each writer owns ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """The files one writer of a run folder owns (glob patterns, `*` within one path component), mirrored under
    one manifest of that name. No two writers own the same file."""

    name: str
    patterns: tuple[str, ...]

    def owns(self, relative: str) -> bool:
        parts = relative.split("/")
        for pattern in self.patterns:
            want = pattern.split("/")
            if len(want) == len(parts) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want, strict=True)):
                return True
        return False


TENSORBOARD_EVENTS = "events.out.tfevents.*"
LEARNER = Part(
    "learner",
    (
        "config.yaml",
        "reproduce.json",
        "metrics.jsonl",
        "eval.json",
        "checkpoints/ckpt-*.pt",
        "policy/policy.safetensors",
        f"tensorboard/{TENSORBOARD_EVENTS}",
    ),
)
EVALUATOR = Part(
    "evaluator", ("evals.jsonl", "policy/best/policy.safetensors", f"tensorboard/evaluator/{TENSORBOARD_EVENTS}")
)
LAUNCHER = Part("launcher", ("summary.json", "chaos.jsonl", "logs/*.log"))


def replay_part(shard: int) -> Part:
    return Part(f"replay-{shard}", (f"replay/shard-{shard}/replay-*.snap",))


# What `surreal plot` reads, and what `surreal eval` needs besides a policy file.
PLOT_FILES = ("config.yaml", "metrics.jsonl", "evals.jsonl", "eval.json", "policy/best/policy.safetensors")


# -- the bucket side ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A file as a manifest lists it."""

    size: int
    sha256: str


@dataclass(frozen=True)
class Pulled:
    """What a pull brought: the files written locally, their bytes, and the ones left out (path: why)."""

    files: tuple[str, ...]
    nbytes: int
    refused: dict[str, str]


def _filesystem(uri: str) -> tuple[Any, str]:
    problem = uri_problem(uri)
    if problem is not None:
        raise StorageError(problem)
    scheme = uri.partition("://")[0]
    try:
        import fsspec
        from fsspec.core import url_to_fs
    except ImportError:
        raise StorageError(f"{uri}: fsspec is not installed ({INSTALL_HINT})") from None
    try:
        fsspec.get_filesystem_class(scheme)
        fs, path = url_to_fs(uri)
        return fs, str(path)
    except ImportError:
        raise StorageError(f"{uri}: {SCHEMES[scheme]} is not installed ({INSTALL_HINT})") from None
    except ValueError as exc:  # an account or option the backend cannot use
        raise StorageError(f"{uri}: {exc}") from None


class RemoteRun:
    """One run folder in a bucket: its manifests, and files moved whole and checked between it and a local folder."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.root = _filesystem(self.uri)
        self.root = self.root.rstrip("/")

    def key(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    # -- manifests

    def manifest(self, part: str) -> dict[str, Entry] | None:
        """The files `part` last recorded (None: it never wrote a manifest here)."""
        try:
            raw = self.fs.cat_file(self.key(f"{MANIFEST_DIR}/{part}.json"), start=0, end=MANIFEST_JSON.max_bytes + 1)
        except FileNotFoundError:
            return None
        try:
            data = loads(raw, MANIFEST_JSON, f"manifest {part}.json")
            if data.get("format") != MANIFEST_FORMAT or data.get("version") != MANIFEST_VERSION:
                raise ValueError(f"format {data.get('format')!r} version {data.get('version')!r}")
            files = {name: Entry(int(e["size"]), str(e["sha256"])) for name, e in data["files"].items()}
        except JsonBoundsError as exc:
            raise StorageError(f"{self.uri}: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(f"{self.uri}: manifest {part}.json is not one this version reads ({exc})") from None
        outside = next((name for name in files if not inside_run_folder(name)), None)
        if outside is not None:
            raise StorageError(
                f"{self.uri}: manifest {part}.json lists {outside[:100]!r}, a path outside the run folder"
            )
        return files

    def parts(self) -> list[str]:
        """The writers that left a manifest here."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.ls(self.key(MANIFEST_DIR), detail=False)
        except FileNotFoundError:
            return []
        return sorted(PurePosixPath(p).stem for p in found if str(p).endswith(".json"))

    def check_writable(self) -> None:
        """StorageError, one line, unless an object can be written and deleted here: a bucket that does not exist, or
        credentials that may not write it, are found when a role or run starts, not at its first checkpoint."""
        probe = self.key(f"{MANIFEST_DIR}/.probe-{os.getpid()}")
        try:
            self.fs.pipe_file(probe, b"")
            self.fs.rm_file(probe)
        except Exception as exc:  # the backends raise many types (botocore, aiohttp, google, azure)
            raise StorageError(f"{self.uri}: cannot write there ({describe(exc)})") from None

    def holds_run(self) -> bool:
        """Whether a run's learner has mirrored anything here."""
        return self.manifest(LEARNER.name) is not None

    def write_manifest(self, part: str, files: dict[str, Entry]) -> None:
        body = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "part": part,
            "written_at": round(time.time(), 3),
            "files": {name: {"size": e.size, "sha256": e.sha256} for name, e in sorted(files.items())},
        }
        self.fs.pipe_file(self.key(f"{MANIFEST_DIR}/{part}.json"), json.dumps(body, indent=1).encode())

    # -- files

    def upload(self, local: Path, relative: str) -> Entry | None:
        """Upload `local` whole to `relative`, hashing the bytes as they go; None when the file is gone (rotated
        away meanwhile). The bytes sent are the file as it was when opened: an atomically replaced file keeps the
        opened version, an appended one is sent up to the size it had then."""
        try:
            f = open(local, "rb")  # noqa: SIM115 - closed below; opening first pins the version sent
        except FileNotFoundError:
            return None
        with f:
            size = os.fstat(f.fileno()).st_size
            digest = hashlib.sha256()
            with self.fs.open(self.key(relative), "wb") as out:
                left = size
                while left > 0:
                    block = f.read(min(CHUNK, left))
                    if not block:  # truncated under us (a rewrite): send what there was
                        break
                    digest.update(block)
                    out.write(block)
                    left -= len(block)
            return Entry(size - left, digest.hexdigest())

    def download(self, relative: str, entry: Entry, local: Path) -> bool:
        """Fetch `relative` into `local` if its bytes are the manifest's `entry` (False, nothing written, if not):
        to a hidden temporary name first, renamed into place only once checked (and gone however the call ends)."""
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.pull")
        digest, size = hashlib.sha256(), 0
        try:
            with self.fs.open(self.key(relative), "rb") as src, open(tmp, "wb") as out:
                while block := src.read(CHUNK):
                    digest.update(block)
                    size += len(block)
                    if size > entry.size:
                        break
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
            if size != entry.size or digest.hexdigest() != entry.sha256:
                return False
            os.replace(tmp, local)
            return True
        except FileNotFoundError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, relatives: Iterable[str]) -> None:
        for relative in relatives:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.key(relative))

    # -- pulling

    def pull(
        self,
        run_dir: Path,
        parts: Iterable[str] | None = None,
        only: Iterable[str] | None = None,
        refresh: bool = False,
    ) -> Pulled:
        """Bring the files that the manifests of `parts` (default: every writer's) list into `run_dir`, checked.
        `only`: just these relative paths (or those that start with one ending in `/`). A file present locally is
        kept (it is the newer or the same), unless `refresh` (a read-only cache: the bucket's is the newer), and
        so is one set aside locally as damaged or foreign. Returns what was written and what was refused."""
        self.fs.invalidate_cache()
        wanted = list(only) if only is not None else None
        written: list[str] = []
        refused: dict[str, str] = {}
        nbytes = 0
        for part in list(parts) if parts is not None else self.parts():
            for _ in range(PULL_TRIES):
                manifest = self.manifest(part) or {}
                pending = {
                    name: entry
                    for name, entry in manifest.items()
                    if _selected(name, wanted) and _needs(run_dir / name, entry, refresh)
                }
                changed = {}
                for name, entry in pending.items():
                    if self.download(name, entry, run_dir / name):
                        written.append(name)
                        nbytes += entry.size
                    else:
                        changed[name] = entry
                if not changed:
                    break
                self.fs.invalidate_cache()  # those changed under the manifest: a newer one lists their new bytes
            for name in changed:
                refused[name] = "its bytes in the bucket are not the ones its manifest lists"
                log.warning("%s/%s: not pulled (%s)", self.uri, name, refused[name])
        return Pulled(tuple(written), nbytes, refused)


def inside_run_folder(name: str) -> bool:
    """Whether a manifest's file name stays inside the run folder it is pulled into: a relative POSIX path of plain
    parts (no `..`, no absolute path, no backslash), so a manifest cannot make a pull write anywhere else."""
    # An empty name, an absolute one (`/etc/x`) and one with `//` all have an empty part.
    return "\\" not in name and all(part not in ("", ".", "..") for part in name.split("/"))


def _selected(name: str, only: list[str] | None) -> bool:
    return only is None or any(name == o or (o.endswith("/") and name.startswith(o)) for o in only)


def _needs(local: Path, entry: Entry, refresh: bool) -> bool:
    if any(local.with_name(local.name + suffix).exists() for suffix in SET_ASIDE):
        return False  # refused here before: pulling it again would only be refused again
    if not local.exists():
        return True
    return refresh and (local.stat().st_size != entry.size or sha256_of(local) != entry.sha256)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


# -- the writer side ------------------------------------------------------------------------------------------------


def local_files(run_dir: Path, part: Part) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of the regular files in `run_dir` that `part` owns."""
    if not run_dir.is_dir():
        return
    for folder, dirs, files in os.walk(run_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(folder, name)
            relative = path.relative_to(run_dir).as_posix()
            if part.owns(relative):
                yield relative, path


@dataclass(frozen=True)
class _Sent:
    """A local file's version as last uploaded (size, mtime, inode identify it without reading it again)."""

    stat: tuple[int, int, int]
    entry: Entry


class Mirror:
    """Keeps one writer's files (`part`) of a local run folder mirrored in the bucket.

    `push()` uploads what changed since the last push, then the manifest, then deletes what the writer dropped.
    `push_soon()` asks a background thread to do it (one at a time; asks made during a push are served by one
    more push after it), so a learner's update loop never waits on the network; `close()` pushes once more and
    waits, for what was written last (a final checkpoint, a last snapshot). A push that fails (the network, the
    store) is logged and counted and the next one tries again: what is on local disk is never at risk."""

    def __init__(self, remote: RemoteRun, run_dir: Path, part: Part, metrics: RoleMetrics | None = None) -> None:
        """`metrics`: the role's, to export its pushes (by result) and bytes uploaded on /metrics."""
        self.remote, self.run_dir, self.part = remote, Path(run_dir), part
        self.m_pushes = self.m_bytes = None
        if metrics is not None:
            self.m_pushes = metrics.counter("run_mirror_pushes_total", "run-folder pushes to the bucket", ["result"])
            self.m_bytes = metrics.counter("run_mirror_uploaded_bytes_total", "run-folder bytes uploaded to the bucket")
        self.sent: dict[str, _Sent] = {}
        self.pushes = 0
        self.failures = 0
        self.pushed_bytes = 0
        self._lock = threading.Lock()  # one push at a time: the thread's, or a caller's
        self._wake = threading.Condition()
        self._asked = 0  # pushes asked for, and the last one of them served: a waiter knows when it is done
        self._served = 0
        self._thread: threading.Thread | None = None
        self._closing = False
        self._remote_manifest: dict[str, Entry] | None = None

    @classmethod
    def open(cls, uri: str, run_dir: Path, part: Part, metrics: RoleMetrics | None = None) -> Mirror:
        return cls(RemoteRun(uri), run_dir, part, metrics)

    def pull(self) -> Pulled:
        """This writer's files from the bucket that the local folder lacks (a role starting on a new disk)."""
        pulled = self.remote.pull(self.run_dir, [self.part.name])
        if pulled.files:
            log.info(
                "pulled %d file(s), %.1f MB, of %s from %s",
                len(pulled.files),
                pulled.nbytes / 1e6,
                self.part.name,
                self.remote.uri,
            )
        return pulled

    def push(self) -> bool:
        """Mirror the part's files now; False (logged, counted) if the bucket could not be written."""
        with self._lock:
            try:
                self._push()
            except Exception as exc:  # the backends raise many types (botocore, aiohttp, google, azure)
                self.failures += 1
                if self.m_pushes is not None:
                    self.m_pushes.labels(result="failed").inc()
                log.warning(
                    "mirroring %s to %s failed (%s); the next push tries again",
                    self.part.name,
                    self.remote.uri,
                    describe(exc),
                )
                return False
            self.pushes += 1
            if self.m_pushes is not None:
                self.m_pushes.labels(result="ok").inc()
            return True

    def _push(self) -> None:
        if not self.run_dir.is_dir():  # nothing written yet: an empty manifest would delete what the bucket holds
            return
        if self._remote_manifest is None:  # what the bucket holds already (a restarted writer re-sends nothing)
            self._remote_manifest = self.remote.manifest(self.part.name) or {}
        files: dict[str, Entry] = {}
        stats: dict[str, _Sent] = {}
        for relative, path in local_files(self.run_dir, self.part):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            stat = (st.st_size, st.st_mtime_ns, st.st_ino)
            known = self.sent.get(relative)
            if known is not None and known.stat == stat:
                files[relative], stats[relative] = known.entry, known
                continue
            there = self._remote_manifest.get(relative)
            if known is None and there is not None and there.size == st.st_size and sha256_of(path) == there.sha256:
                entry = there
            else:
                uploaded = self.remote.upload(path, relative)
                if uploaded is None:
                    continue
                entry = uploaded
                self.pushed_bytes += entry.size
                if self.m_bytes is not None:
                    self.m_bytes.inc(entry.size)
            files[relative], stats[relative] = entry, _Sent(stat, entry)
        self.remote.write_manifest(self.part.name, files)
        dropped = set(self._remote_manifest) - set(files)
        self.remote.delete(sorted(dropped))
        self._remote_manifest, self.sent = files, stats

    # -- in the background

    def push_soon(self) -> None:
        """Ask for a push on the mirror's thread (started on first use); returns at once."""
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"mirror-{self.part.name}", daemon=True)
                self._thread.start()
            self._asked += 1
            self._wake.notify_all()

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._served == self._asked and not self._closing:
                    self._wake.wait()
                if self._served == self._asked and self._closing:
                    return
                target = self._asked
            self.push()
            with self._wake:
                self._served = target
                self._wake.notify_all()

    def close(self, timeout_s: float | None = None) -> bool:
        """Push once more (what was written last) and wait for it; stop the thread. False: that push failed."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.push()


def open_mirror(uri: str | None, run_dir: Path, part: Part, metrics: RoleMetrics | None = None) -> Mirror | None:
    """The mirror of `part` of the run folder at `uri` (a role's SURREAL_RUN_URI), checked writable (StorageError,
    one line, if not), exporting to `metrics`; None without one."""
    if uri is None:
        return None
    mirror = Mirror.open(uri, run_dir, part, metrics)
    mirror.remote.check_writable()
    return mirror


# -- read-only copies (surreal plot, surreal eval) ------------------------------------------------------------------

LOCATE_DEPTH = 4  # a path inside a run folder is at most this deep: policy/best/policy.safetensors


def locate(uri: str) -> tuple[RemoteRun, str]:
    """The run folder in a bucket that `uri` names or lies in (the nearest folder up with manifests), and the
    rest of `uri` within it ("" for the folder itself)."""
    candidate, rest = uri.rstrip("/"), list[str]()
    for _ in range(LOCATE_DEPTH):
        remote = RemoteRun(candidate)
        if remote.parts():
            return remote, "/".join(reversed(rest))
        head, _, tail = candidate.rpartition("/")
        if head.endswith(":/") or "://" not in head or not head.partition("://")[2]:
            break
        rest.append(tail)
        candidate = head
    raise StorageError(f"{uri}: no run folder there (nothing mirrored by a run in it or in the folders above it)")


def cached_run(uri: str, only: Iterable[str] | None = None) -> tuple[Path, str]:
    """A local, checked copy of the run folder `uri` names or lies in (`cache_dir`), brought up to date with the
    bucket for the files `only` names (default: all); returns the copy and the rest of `uri` within it."""
    remote, rest = locate(uri)
    local = cache_dir(remote.uri)
    remote.pull(local, only=only, refresh=True)
    return local, rest
