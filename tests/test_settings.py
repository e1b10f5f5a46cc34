"""The SURREAL_* contract (src/surreal/settings.py): what a role reads from its environment, the inverse a
launcher writes, the errors a bad value gives before anything starts, and the one table the docs mirror."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import surreal.settings
from surreal.settings import ReplayEndpoint, Settings, SettingsError

CONCEPTS = Path(__file__).resolve().parents[1] / "docs" / "concepts.md"


def documented_variables() -> list[str]:
    return re.findall(r"^\| (SURREAL_\w+) ", surreal.settings.__doc__ or "", flags=re.M)


def test_a_launchers_environment_reads_back_as_the_same_settings():
    settings = Settings(
        index=3,
        bind_host="0.0.0.0",
        metrics_port=0,
        replay=(ReplayEndpoint("replay-0.replay"), ReplayEndpoint("10.0.0.7", 8001, 8002)),
        learner_addr="tcp://learner:7003",
        ps_addrs=("tcp://ps-0:7004", "tcp://ps-1:7010"),
        config_path=Path("/etc/surreal/experiment.yaml"),
        run_dir=Path("/data/run"),
        hold_when_done=True,
    )
    assert Settings.from_env(settings.to_env()) == settings


def test_an_empty_environment_is_the_loopback_defaults():
    assert Settings.from_env({}) == Settings()
    assert Settings().hold_when_done is False, "surreal run relies on a finished learner exiting"


def test_the_index_falls_back_to_the_statefulset_ordinal():
    assert Settings.from_env({"HOSTNAME": "exp1-surreal-actor-12"}).index == 12
    assert Settings.from_env({"HOSTNAME": "exp1-surreal-actor-12", "SURREAL_INDEX": "2"}).index == 2


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("0", False), ("FALSE", False)])
def test_hold_when_done_reads_a_flag(value, expected):
    assert Settings.from_env({"SURREAL_HOLD_WHEN_DONE": value}).hold_when_done is expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SURREAL_HOLD_WHEN_DONE": "yes please"}, "SURREAL_HOLD_WHEN_DONE"),
        ({"SURREAL_EXPERIENCE_PORT": "70000"}, "not a valid port"),
        ({"SURREAL_PS_PORT": "0"}, "not a valid port"),
        ({"SURREAL_INDEX": "-1"}, "must be >= 0"),
        ({"SURREAL_REPLAY_ADDRS": "host:1"}, "neither"),
        ({"SURREAL_PS_ADDRS": " , "}, "empty address list"),
        ({"SURREAL_LEARNER_ADDR": ":7003"}, "has no host"),
        ({"SURREAL_SAMPLE_PORT": "seven"}, "SURREAL_SAMPLE_PORT=.seven. is not an integer"),
    ],
)
def test_a_bad_value_is_a_settings_error_naming_it(env, message):
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_the_table_documents_every_variable_a_launcher_writes_and_the_docs_mirror_it():
    documented = documented_variables()
    written = set(Settings(config_path=Path("x.yaml"), ipc_dir=Path("/tmp/s"), run_uri="s3://b/runs/x").to_env())
    assert set(documented) == written
    concepts = CONCEPTS.read_text()
    missing = [name for name in documented if f"`{name}`" not in concepts]
    assert not missing, f"docs/concepts.md's SURREAL_* table lacks {missing}"


def test_with_an_ipc_dir_every_zmq_address_is_a_unix_socket_named_by_its_port():
    settings = Settings(
        replay=(ReplayEndpoint("127.0.0.1", 8001, 8002),),
        learner_addr="tcp://127.0.0.1:8003",
        ps_addrs=("tcp://127.0.0.1:8004",),
        ipc_dir=Path("/tmp/surreal-x"),
    )
    again = Settings.from_env(settings.to_env())
    assert again == settings
    assert again.bind(8001) == again.experience_addrs[0] == "ipc:///tmp/surreal-x/8001"
    assert again.sample_addrs == ["ipc:///tmp/surreal-x/8002"]
    assert again.connect(again.learner_addr) == "ipc:///tmp/surreal-x/8003"
    assert Settings().connect("tcp://ps-0:7004") == "tcp://ps-0:7004", "unset: TCP as given"
