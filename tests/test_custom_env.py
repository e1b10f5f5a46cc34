"""Your own environment as `module:EnvId`: the example docs/environments.md shows, run as the page says.

The module is the page's own code block, written to a folder on PYTHONPATH, so the page cannot drift from what
works: the id is checked (a typo names the nearest registered id, an unknown module says so), and `surreal run`
trains on it end to end, the launcher and every role importing the module."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from surreal.config import ConfigError
from surreal.envs import check_env_id

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "environments.md"


def example_module(folder: Path) -> Path:
    """docs/environments.md's `my_envs.py` block, written to `folder`."""
    (block,) = re.findall(r"```python\n# my_envs\.py\n(.*?)```", PAGE.read_text(), re.S)
    (folder / "my_envs.py").write_text(block)
    return folder


def test_a_module_id_registers_its_env_on_import_and_a_typo_names_the_nearest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(example_module(tmp_path)))
    check_env_id("my_envs:PointReach-v0")
    with pytest.raises(ConfigError, match=r"did you mean 'PointReach-v0'"):
        check_env_id("my_envs:PointRaech-v0")
    with pytest.raises(ConfigError, match=r"cannot import 'no_such_envs'"):
        check_env_id("no_such_envs:PointReach-v0")


@pytest.mark.slow
def test_surreal_run_trains_on_it_with_the_module_on_pythonpath(tmp_path: Path) -> None:
    (tmp_path / "modules").mkdir()
    modules = example_module(tmp_path / "modules")
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(modules), "SURREAL_RUNS_ROOT": str(elsewhere / "runs")}
    surreal = Path(sys.executable).parent / "surreal"  # the console script, as the page's command runs it
    done = subprocess.run(
        [str(surreal), "run", "env=my_envs:PointReach-v0", "steps=4096", "name=custom", "--no-progress"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((elsewhere / "runs" / "custom" / "eval.json").read_text())
    assert math.isfinite(result["eval_return_mean"]), result
    config = (elsewhere / "runs" / "custom" / "config.yaml").read_text()
    assert "id: my_envs:PointReach-v0" in config
