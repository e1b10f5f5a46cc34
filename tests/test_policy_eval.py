"""`surreal eval`: the run's evaluation replayed by default, MP4s with --video (offscreen MuJoCo: the Makefile's
render-deps installs OSMesa and ffmpeg's ffprobe; classic control through pygame, the `video` extra; robosuite in
tests/test_robosuite.py), where the result goes, and one line with exit status 2 for what cannot run."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from surreal.cli import main
from surreal.config import load_config
from surreal.errors import install_extra
from surreal.run.serial import run_serial

RUN = ["device=cpu", "algo=ppo", "env=InvertedPendulum-v5", "actors=1", "actor.chunk_steps=64", "algo.batch_size=128"]
RUN += ["algo.minibatch_size=64", "algo.update_epochs=2", "steps=256", "seed=4", "learner.eval_episodes=3"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    result = run_serial(load_config(RUN), run_dir)
    assert result is not None
    return run_dir, result


def ffprobe_frames(path) -> int:
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries", "stream=nb_read_frames"]
        + ["-of", "json", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(json.loads(probe.stdout)["streams"][0]["nb_read_frames"])


def decoded_frames(path, size: int = 480) -> np.ndarray:
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, size, size, 3)


def test_defaults_replay_the_runs_final_evaluation(run, tmp_path, capsys):
    run_dir, result = run
    assert main(["eval", str(run_dir), "--json", str(tmp_path / "e.json")]) == 0
    replayed = json.loads((tmp_path / "e.json").read_text())
    assert (replayed["seed"], replayed["eval_episodes"]) == (4, 3), "the run's seed and episode count"
    assert replayed["eval_returns"] == result["eval_returns"]
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("InvertedPendulum-v5: return ") and "over 3 deterministic episodes (seed 4)" in line
    assert main(["eval", str(run_dir)]) == 0
    assert (run_dir / "policy" / "eval.json").is_file(), "default: beside the policy, not over the run's eval.json"
    assert json.loads((run_dir / "eval.json").read_text()) == result


@pytest.mark.system
def test_video_writes_mp4s_whose_frames_ffprobe_reads_and_that_differ(run, tmp_path):
    run_dir, _ = run
    videos = tmp_path / "videos"
    args = ["eval", str(run_dir), "--episodes", "2", "--seed", "9", "--video", str(videos)]
    assert main([*args, "--json", str(tmp_path / "v.json")]) == 0
    with_video = json.loads((tmp_path / "v.json").read_text())
    assert [p.rsplit("/", 1)[-1] for p in with_video["videos"]] == ["env0-episode-1.mp4", "env1-episode-1.mp4"]
    assert sorted(p.name for p in videos.iterdir()) == ["env0-episode-1.mp4", "env1-episode-1.mp4"]
    counts = []
    for path in with_video["videos"]:
        frames = decoded_frames(path)
        counts.append(ffprobe_frames(path))
        assert len(frames) == counts[-1] > 2
        assert frames.std() > 0 and not np.array_equal(frames[0], frames[-1]), "the pole moves"
    # InvertedPendulum-v5 pays 1 per step but 0 on the step that ends the episode (these end by falling): a video
    # holds the reset frame and one per step, return + 2 frames (returns are listed as episodes end, any env first).
    assert sorted(c - 2 for c in counts) == sorted(int(r) for r in with_video["eval_returns"])
    assert main([*args[:-2], "--json", str(tmp_path / "n.json")]) == 0
    assert json.loads((tmp_path / "n.json").read_text())["eval_returns"] == with_video["eval_returns"]


@pytest.mark.system
def test_eval_json_beside_the_policy_holds_only_its_own_evaluation(run, tmp_path, capsys):
    """The defaults re-run the policy's own evaluation into policy/eval.json; a recording of one episode goes beside
    its videos and another evaluation is printed only (--json writes it): neither replaces the policy's eval.json."""
    run_dir, result = run
    own = run_dir / "policy" / "eval.json"
    assert main(["eval", str(run_dir)]) == 0
    written = own.read_text()
    assert json.loads(written)["eval_returns"] == result["eval_returns"]
    videos = tmp_path / "videos"
    assert main(["eval", str(run_dir), "--episodes", "1", "--video", str(videos)]) == 0
    assert f"wrote {videos / 'eval.json'} and 1 videos in {videos}" in capsys.readouterr().out
    recorded = json.loads((videos / "eval.json").read_text())
    assert recorded["eval_episodes"] == 1 and recorded["videos"] == [str(videos / "env0-episode-1.mp4")]
    assert main(["eval", str(run_dir), "--episodes", "2", "--seed", "11"]) == 0
    assert "not written" in capsys.readouterr().out
    assert own.read_text() == written, "the policy's own evaluation stays"
    assert json.loads((run_dir / "eval.json").read_text()) == result


PENDULUM = ["device=cpu", "algo=ppo", "env=Pendulum-v1", "env.kwargs.max_episode_steps=20", "actors=1"]
PENDULUM += ["actor.chunk_steps=32", "algo.batch_size=64", "algo.minibatch_size=32", "steps=128"]
PENDULUM += ["learner.eval_episodes=1"]


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pendulum")
    assert run_serial(load_config(PENDULUM), run_dir) is not None
    return run_dir


@pytest.mark.system
def test_a_classic_control_task_is_recorded_through_pygame(pendulum, tmp_path, capfd):
    """Pendulum-v1, the README's env, draws its frames with pygame (the `video` extra): no OpenGL needed, and
    nothing said on stderr (SDL looking for a display on a headless box did)."""
    videos = tmp_path / "videos"
    assert main(["eval", str(pendulum), "--video", str(videos)]) == 0
    assert capfd.readouterr().err == ""
    (video,) = json.loads((videos / "eval.json").read_text())["videos"]
    frames = decoded_frames(video, size=500)
    assert ffprobe_frames(video) == len(frames) == 21, "the reset frame and one per step of the 20-step episode"
    assert frames.std() > 0 and not np.array_equal(frames[0], frames[-1]), "the pendulum swings"


@pytest.mark.system
def test_what_a_recording_lacks_is_one_line_before_anything_is_written(pendulum, tmp_path, capsys, monkeypatch):
    videos = tmp_path / "videos"
    monkeypatch.setitem(sys.modules, "pygame", None)  # as where it is not installed
    err = one_line_exit_2(capsys, str(pendulum), "--video", str(videos))
    assert f"Pendulum-v1 draws its frames with pygame, not installed: {install_extra('video')}" in err
    monkeypatch.setitem(sys.modules, "moviepy", None)
    assert f"writing MP4s needs moviepy: {install_extra('video')}" in one_line_exit_2(
        capsys, str(pendulum), "--video", str(videos)
    )
    assert not videos.exists() and not (pendulum / "policy" / "eval.json").exists()


def test_stochastic_samples_and_scores_otherwise(run, tmp_path):
    run_dir, result = run
    assert main(["eval", str(run_dir), "--stochastic", "--json", str(tmp_path / "s.json")]) == 0
    sampled = json.loads((tmp_path / "s.json").read_text())
    assert sampled["deterministic"] is False and sampled["eval_returns"] != result["eval_returns"]


def one_line_exit_2(capsys, *args: str) -> str:
    assert main(["eval", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("surreal eval: "), err
    return err


def test_no_renderer_is_one_line(run, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    err = one_line_exit_2(capsys, str(run[0]), "--video", str(tmp_path / "v"))
    assert "no offscreen renderer starts (no-such-backend:" in err and "libosmesa6" in err
    assert not (tmp_path / "v").exists()


def test_what_cannot_run_is_one_line(run, tmp_path, capsys):
    run_dir, _ = run
    assert "the policy takes (4,)" in one_line_exit_2(capsys, str(run_dir), "--env", "Pendulum-v1")
    assert "cannot make env" in one_line_exit_2(capsys, str(run_dir), "--env", "NoSuchEnv-v0")
    assert "--episodes must be >= 1" in one_line_exit_2(capsys, str(run_dir), "--episodes", "0")
    assert "no such file" in one_line_exit_2(capsys, str(tmp_path / "missing"))
