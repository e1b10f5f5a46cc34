"""The run folder as a cache of a bucket (surreal/runstore.py), against a real S3 server (moto's, in a process of its
own) through the real client (s3fs): whole files, manifests written last, downloads checked before they land,
rotated files deleted, a restarted writer re-sending nothing, a replay shard's snapshot back whole on a new disk."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import fsspec
import numpy as np
import pytest

from surreal.config import ConfigError, load_config
from surreal.proto.wire import Chunk, encode_chunk
from surreal.replay.buffers import TransitionStorage
from surreal.replay.shard import ReplayShard
from surreal.roles.replay import open_snapshots
from surreal.runstore import (
    EVALUATOR,
    LEARNER,
    MANIFEST_DIR,
    Mirror,
    RemoteRun,
    StorageError,
    cache_dir,
    replay_part,
    uri_problem,
)
from surreal.settings import Settings, SettingsError

log = logging.getLogger("test.runstore")


def s3() -> fsspec.AbstractFileSystem:
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    return fs


def learner_folder(root: Path) -> Path:
    """A run folder with the learner's files, and others' (the evaluator's, a temporary) it must not take."""
    files = {
        "config.yaml": b"algo:\n  name: ddpg\n",
        "metrics.jsonl": b'{"updates": 1}\n{"updates": 2}\n',
        "checkpoints/ckpt-0000000004.pt": b"four" * 1000,
        "checkpoints/ckpt-0000000008.pt": b"eight" * 1000,
        "checkpoints/.ckpt-0000000012.pt.tmp": b"half a write",
        "policy/policy.safetensors": b"policy bytes",
        "tensorboard/events.out.tfevents.1.host": b"events",
        "tensorboard/evaluator/events.out.tfevents.2.host": b"evaluator's events",
        "evals.jsonl": b'{"env_steps": 5}\n',
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


LEARNERS_FILES = {
    "config.yaml",
    "metrics.jsonl",
    "checkpoints/ckpt-0000000004.pt",
    "checkpoints/ckpt-0000000008.pt",
    "policy/policy.safetensors",
    "tensorboard/events.out.tfevents.1.host",
}


def manifest(bucket_run: str, part: str) -> dict:
    return json.loads(s3().cat_file(f"{bucket_run.removeprefix('s3://')}/{MANIFEST_DIR}/{part}.json"))


def test_a_push_uploads_the_writers_files_whole_then_its_manifest_and_a_pull_brings_them_back_checked(
    tmp_path, s3_bucket
):
    uri = f"{s3_bucket}/runs/r1"
    local = learner_folder(tmp_path / "a")
    mirror = Mirror.open(uri, local, LEARNER)
    assert mirror.push()
    listed = manifest(uri, "learner")["files"]
    assert set(listed) == LEARNERS_FILES
    for name, entry in listed.items():
        data = (local / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        assert s3().cat_file(f"{uri.removeprefix('s3://')}/{name}") == data

    fresh = tmp_path / "b"
    pulled = RemoteRun(uri).pull(fresh)
    assert set(pulled.files) == LEARNERS_FILES and not pulled.refused
    for name in LEARNERS_FILES:
        assert (fresh / name).read_bytes() == (local / name).read_bytes()
    assert not (fresh / "evals.jsonl").exists(), "the evaluator's files are the evaluator's to mirror"
    assert not list(fresh.rglob(".*.pull")), "no temporary left behind"


def test_a_rotated_checkpoint_leaves_the_bucket_after_the_manifest_that_drops_it(tmp_path, s3_bucket):
    uri = f"{s3_bucket}/r"
    local = learner_folder(tmp_path / "a")
    mirror = Mirror.open(uri, local, LEARNER)
    assert mirror.push()
    (local / "checkpoints/ckpt-0000000004.pt").unlink()
    (local / "checkpoints/ckpt-0000000012.pt").write_bytes(b"twelve")
    assert mirror.push()
    listed = set(manifest(uri, "learner")["files"])
    assert "checkpoints/ckpt-0000000004.pt" not in listed and "checkpoints/ckpt-0000000012.pt" in listed
    assert not s3().exists(f"{uri.removeprefix('s3://')}/checkpoints/ckpt-0000000004.pt")


def test_a_restarted_writer_sends_only_what_changed(tmp_path, s3_bucket):
    uri = f"{s3_bucket}/r"
    local = learner_folder(tmp_path / "a")
    first = Mirror.open(uri, local, LEARNER)
    assert first.push() and first.pushed_bytes == sum((local / name).stat().st_size for name in LEARNERS_FILES)
    again = Mirror.open(uri, local, LEARNER)  # a new process over the same folder
    with open(local / "metrics.jsonl", "ab") as f:
        f.write(b'{"updates": 3}\n')
    assert again.push()
    assert again.pushed_bytes == (local / "metrics.jsonl").stat().st_size, "only the appended file went up again"


@pytest.mark.parametrize("damage", ["replaced", "truncated", "deleted"])
def test_a_pull_never_lands_a_file_whose_bytes_are_not_its_manifests(tmp_path, s3_bucket, damage, caplog):
    uri = f"{s3_bucket}/r"
    local = learner_folder(tmp_path / "a")
    assert Mirror.open(uri, local, LEARNER).push()
    key = f"{uri.removeprefix('s3://')}/checkpoints/ckpt-0000000008.pt"
    if damage == "replaced":
        s3().pipe_file(key, b"X" * len((local / "checkpoints/ckpt-0000000008.pt").read_bytes()))
    elif damage == "truncated":
        s3().pipe_file(key, (local / "checkpoints/ckpt-0000000008.pt").read_bytes()[:100])
    else:
        s3().rm_file(key)
    fresh = tmp_path / "b"
    with caplog.at_level(logging.WARNING, "surreal.runstore"):
        pulled = RemoteRun(uri).pull(fresh)
    assert set(pulled.refused) == {"checkpoints/ckpt-0000000008.pt"}
    assert not (fresh / "checkpoints/ckpt-0000000008.pt").exists()
    assert not list(fresh.rglob(".*.pull")), "the refused download left nothing behind"
    kept = "checkpoints/ckpt-0000000004.pt"
    assert (fresh / kept).read_bytes() == (local / kept).read_bytes()
    assert "not pulled" in caplog.text


def test_a_file_no_manifest_lists_is_never_pulled(tmp_path, s3_bucket):
    """An upload that a writer's crash cut off before its manifest: the bucket holds it, no reader takes it."""
    uri = f"{s3_bucket}/r"
    local = learner_folder(tmp_path / "a")
    assert Mirror.open(uri, local, LEARNER).push()
    s3().pipe_file(f"{uri.removeprefix('s3://')}/checkpoints/ckpt-0000000099.pt", b"orphan")
    fresh = tmp_path / "b"
    RemoteRun(uri).pull(fresh)
    assert not (fresh / "checkpoints/ckpt-0000000099.pt").exists()


def test_local_files_are_kept_unless_refreshing_and_set_aside_ones_are_not_pulled_again(tmp_path, s3_bucket):
    uri = f"{s3_bucket}/r"
    local = learner_folder(tmp_path / "a")
    assert Mirror.open(uri, local, LEARNER).push()
    cache = tmp_path / "cache"
    (cache / "checkpoints").mkdir(parents=True)
    (cache / "metrics.jsonl").write_bytes(b"newer here\n")
    (cache / "checkpoints/ckpt-0000000008.pt.corrupt").write_bytes(b"refused before")
    pulled = RemoteRun(uri).pull(cache)
    assert (cache / "metrics.jsonl").read_bytes() == b"newer here\n", "a file on local disk is the newer one"
    assert "checkpoints/ckpt-0000000008.pt" not in pulled.files
    RemoteRun(uri).pull(cache, refresh=True, only=["metrics.jsonl"])
    assert (cache / "metrics.jsonl").read_bytes() == (local / "metrics.jsonl").read_bytes(), "a read-only cache follows"


def test_background_pushes_and_the_last_one_on_close(tmp_path, s3_bucket):
    uri = f"{s3_bucket}/r"
    local = learner_folder(tmp_path / "a")
    mirror = Mirror.open(uri, local, EVALUATOR)
    mirror.push_soon()
    (local / "policy/best").mkdir(parents=True)
    (local / "policy/best/policy.safetensors").write_bytes(b"best")
    assert mirror.close(timeout_s=120)
    assert set(manifest(uri, "evaluator")["files"]) == {
        "evals.jsonl",
        "policy/best/policy.safetensors",
        "tensorboard/evaluator/events.out.tfevents.2.host",
    }
    assert mirror.failures == 0 and mirror.pushes >= 2


def test_a_bucket_that_cannot_be_written_is_a_logged_failure_and_the_folder_is_untouched(tmp_path, s3_bucket, caplog):
    local = learner_folder(tmp_path / "a")
    before = {p: p.read_bytes() for p in local.rglob("*") if p.is_file()}
    mirror = Mirror.open("s3://no-such-bucket-here/r", local, LEARNER)
    with caplog.at_level(logging.WARNING, "surreal.runstore"):
        assert not mirror.push()
    assert mirror.failures == 1 and "mirroring learner to s3://no-such-bucket-here/r failed" in caplog.text
    assert {p: p.read_bytes() for p in local.rglob("*") if p.is_file()} == before


def test_a_replay_shards_snapshot_comes_back_whole_on_a_new_disk(tmp_path, s3_bucket):
    """The shard's own path (roles/replay.py `open_snapshots`): its snapshot is mirrored as it is written; a shard
    started on an empty folder with the same bucket pulls it, checked, and holds exactly what the first held."""
    cfg = load_config(["algo=ddpg", "env=Pendulum-v1", "replay.capacity=300", "replay.snapshot_interval_s=1"])
    uri = f"{s3_bucket}/runs/shard-test"
    first = ReplayShard.of(cfg.replay, cfg.seed, 0)
    snapshots = open_snapshots(cfg, tmp_path / "node-a", first, uri)
    rng = np.random.default_rng(0)
    for i in range(40):  # 320 transitions into 300: the ring wraps
        arrays = {"obs": rng.normal(size=(4, 2, 3)).astype(np.float32), "rew": rng.normal(size=(4, 2))}
        first.add(encode_chunk(Chunk(arrays, i, 0), ""))
    assert snapshots.final() is not None
    snapshots.close()
    listed = manifest(uri, "replay-0")["files"]
    assert len(listed) == 1 and next(iter(listed)).startswith("replay/shard-0/replay-")

    second = ReplayShard.of(cfg.replay, cfg.seed, 0)
    open_snapshots(cfg, tmp_path / "node-b", second, uri).close()
    a, b = first.storage, second.storage
    assert isinstance(a, TransitionStorage) and isinstance(b, TransitionStorage)
    assert b.stats()["size"] == 300 and a.stats() == b.stats()
    for key, array in a.data.items():
        np.testing.assert_array_equal(array, b.data[key])
    np.testing.assert_array_equal(a.ids, b.ids)


def test_a_fifo_snapshot_restored_once_leaves_the_bucket_too(tmp_path, s3_bucket):
    """A FIFO serves each chunk once: the snapshot restored is removed, here and in the bucket, so a second restart
    does not serve its chunks again."""
    cfg = load_config(["algo=ppo", "env=Pendulum-v1", "replay.snapshot_interval_s=1"])
    uri = f"{s3_bucket}/runs/fifo"
    first = ReplayShard.of(cfg.replay, cfg.seed, 0)
    snapshots = open_snapshots(cfg, tmp_path / "a", first, uri)
    first.add(encode_chunk(Chunk({"obs": np.ones((4, 1, 3), np.float32)}, 0, 0), ""))
    assert snapshots.final() is not None
    snapshots.close()
    second = ReplayShard.of(cfg.replay, cfg.seed, 0)
    open_snapshots(cfg, tmp_path / "b", second, uri).close()
    assert second.stats()["size"] == 4
    assert manifest(uri, "replay-0")["files"] == {}
    third = ReplayShard.of(cfg.replay, cfg.seed, 0)
    open_snapshots(cfg, tmp_path / "c", third, uri).close()
    assert third.stats()["size"] == 0


@pytest.mark.parametrize(
    "uri", ["runs/local", "ftp://host/x", "s3://", "http://bucket/x"], ids=["path", "ftp", "no-bucket", "http"]
)
def test_a_uri_that_cannot_hold_runs_is_one_line_early(uri):
    assert uri_problem(uri) is not None
    with pytest.raises(ConfigError, match="run_uri"):
        load_config([f"run_uri={uri}"])
    with pytest.raises(SettingsError, match="SURREAL_RUN_URI"):
        Settings.from_env({"SURREAL_RUN_URI": uri})
    with pytest.raises(StorageError):
        RemoteRun(uri)


def test_good_uris_and_where_read_only_copies_go(monkeypatch, tmp_path):
    for uri in ("s3://b/runs", "gs://b/x/y", "az://container/runs"):
        assert uri_problem(uri) is None
        assert load_config([f"run_uri={uri}"]).run_uri == uri
    assert Settings.from_env({"SURREAL_RUN_URI": "s3://b/runs/x/"}).run_uri == "s3://b/runs/x"
    monkeypatch.setenv("SURREAL_CACHE_DIR", str(tmp_path))
    assert cache_dir("s3://b/runs/../x") == tmp_path / "s3" / "b" / "runs" / "x"


def test_each_writer_owns_its_files_and_no_file_has_two_writers():
    names = [
        "config.yaml",
        "metrics.jsonl",
        "eval.json",
        "checkpoints/ckpt-0000000001.pt",
        "policy/policy.safetensors",
        "policy/best/policy.safetensors",
        "evals.jsonl",
        "tensorboard/events.out.tfevents.1.h",
        "tensorboard/evaluator/events.out.tfevents.1.h",
        "replay/shard-0/replay-0000000001.snap",
        "replay/shard-1/replay-0000000001.snap",
    ]
    parts = [LEARNER, EVALUATOR, replay_part(0), replay_part(1)]
    for name in names:
        owners = [p.name for p in parts if p.owns(name)]
        assert len(owners) == 1, (name, owners)
    assert not LEARNER.owns("checkpoints/.ckpt-0000000001.pt.tmp") and not LEARNER.owns("checkpoints/x.corrupt")


# -- surreal plot, and a whole run ----------------------------------------------------------------------------------


def test_surreal_plot_draws_a_runs_curve_from_the_bucket(tmp_path, s3_bucket, monkeypatch, capsys):
    from surreal.cli import main

    run = tmp_path / "runs" / "plotted"
    run.mkdir(parents=True)
    rows = [{"env_steps": 1000 * i, "updates": i, "train_return_mean": -1000.0 + 50 * i} for i in range(1, 11)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "config.yaml").write_text("algo:\n  name: ddpg\nenv:\n  id: Pendulum-v1\nseed: 3\n")
    assert Mirror.open(f"{s3_bucket}/runs/plotted", run, LEARNER).push()
    monkeypatch.setenv("SURREAL_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["plot", f"{s3_bucket}/runs/plotted"]) == 0
    png = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert png.parent == cache_dir(f"{s3_bucket}/runs/plotted"), "the bucket's run is plotted from its local copy"
    assert main(["plot", f"{s3_bucket}/runs/nothing-here"]) == 2
    assert "no run folder there" in capsys.readouterr().err


def test_a_bucket_that_cannot_be_written_is_one_line_at_the_start(tmp_path, s3_bucket, capsys, monkeypatch):
    from surreal.cli import main
    from surreal.runstore import open_mirror

    with pytest.raises(StorageError, match=r"s3://no-such-bucket-here/r: cannot write there \(.*\)$"):
        open_mirror("s3://no-such-bucket-here/r", tmp_path, LEARNER)
    assert open_mirror(f"{s3_bucket}/r", tmp_path, LEARNER) is not None
    assert s3().find(s3_bucket.removeprefix("s3://")) == [], "the probe leaves nothing"
    monkeypatch.setenv("SURREAL_RUNS_ROOT", str(tmp_path / "runs"))
    code = main(["run", "algo=ddpg", "env=Pendulum-v1", "name=x", "run_uri=s3://no-such-bucket-here/runs"])
    err = capsys.readouterr().err
    assert code == 2 and "s3://no-such-bucket-here/runs/x: cannot write there" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_path_inside_a_bucket_run_is_found_in_its_run_folder_and_copied_checked(tmp_path, s3_bucket, monkeypatch):
    from surreal.runstore import cached_run, locate

    monkeypatch.setenv("SURREAL_CACHE_DIR", str(tmp_path / "cache"))
    local = learner_folder(tmp_path / "a")
    (local / "policy/best").mkdir(parents=True)
    (local / "policy/best/policy.safetensors").write_bytes(b"the best")
    uri = f"{s3_bucket}/runs/r"
    assert Mirror.open(uri, local, LEARNER).push() and Mirror.open(uri, local, EVALUATOR).push()
    remote, rest = locate(f"{uri}/policy/best/")
    assert remote.uri == uri and rest == "policy/best"
    copy, rest = cached_run(f"{uri}/policy/best", only=["policy/"])
    assert (copy / rest / "policy.safetensors").read_bytes() == b"the best"
    assert not (copy / "checkpoints").exists(), "only what was asked for"
    (local / "policy/best/policy.safetensors").write_bytes(b"a better one")
    assert Mirror.open(uri, local, EVALUATOR).push()
    copy, rest = cached_run(f"{uri}/policy/best", only=["policy/"])
    assert (copy / rest / "policy.safetensors").read_bytes() == b"a better one", "a read-only copy follows the bucket"
    with pytest.raises(StorageError, match="no run folder there"):
        locate(f"{s3_bucket}/elsewhere/x")


def test_a_sweeps_members_are_mirrored_in_a_folder_of_the_sweep():
    from surreal.commands.sweep import in_sweep_folder

    assert in_sweep_folder(["seed=1", "run_uri=s3://b/runs/", "algo=ddpg"], "pend-sweep") == [
        "seed=1",
        "run_uri=s3://b/runs/pend-sweep",
        "algo=ddpg",
    ]
    assert in_sweep_folder(["seed=2"], "s") == ["seed=2"]


def test_pushes_and_bytes_are_on_the_roles_metrics(tmp_path, s3_bucket):
    from surreal.metrics import RoleMetrics

    local = learner_folder(tmp_path / "a")
    good, bad = RoleMetrics("learner", 0), RoleMetrics("learner", 1)
    assert Mirror.open(f"{s3_bucket}/r", local, LEARNER, good).push()
    assert not Mirror.open("s3://no-such-bucket-here/r", local, LEARNER, bad).push()

    def value(metrics: RoleMetrics, name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(f"surreal_{name}", {**metrics.labels, **labels})

    assert value(good, "run_mirror_pushes_total", result="ok") == 1
    assert value(bad, "run_mirror_pushes_total", result="failed") == 1
    uploaded = sum((local / name).stat().st_size for name in LEARNERS_FILES)
    assert value(good, "run_mirror_uploaded_bytes_total") == uploaded


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"format": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested deeper than"),
        (b" " * ((16 << 20) + 1), "byte limit"),
        (
            json.dumps(
                {
                    "format": "surreal-run-manifest",
                    "version": 1,
                    "files": {"../../outside.txt": {"size": 1, "sha256": "0" * 64}},
                }
            ).encode(),
            "a path outside the run folder",
        ),
    ],
    ids=["nested 200,000 deep", "over 16 MiB", "a path out of the run folder"],
)
def test_a_hostile_manifest_is_one_line_and_pulls_nothing(tmp_path, s3_bucket, body, expected):
    """A manifest is read from a bucket anyone with access may have written: bounded before it is parsed, and a
    file it lists must stay inside the run folder it is pulled into."""
    uri = f"{s3_bucket}/hostile"
    s3().pipe_file(f"{uri.removeprefix('s3://')}/{MANIFEST_DIR}/learner.json", body)
    with pytest.raises(StorageError, match=expected) as refused:
        RemoteRun(uri).pull(tmp_path / "run")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "outside.txt").exists() and not list(tmp_path.rglob("*.pull"))
