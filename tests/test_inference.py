"""An inference worker (roles/inference.py) and the actors' `InferenceClient` in one process, on loopback: requests
batched across actors, answered with the rows each asked for, `NO_PARAMS` before any parameters, and failover from
a worker that does not answer to one that does."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from conftest import free_port
from surreal.config import algo_config, load_config
from surreal.envs import env_spaces
from surreal.proto.channels import INFERENCE_TIMEOUT, NOT_READY, InferenceClient, ParamClient, bind_socket, frames_of
from surreal.proto.codec import Limits, decode
from surreal.proto.wire import BlobMeta, NotModified, Params, ParamsRequest, encode_params
from surreal.roles.common import StopFlag
from surreal.roles.inference import InferenceServer

ADDR = "tcp://127.0.0.1:{}"


class FakePs:
    """A ps on loopback that answers every request at once: "not modified" until `params` is set, then the blob."""

    def __init__(self, ctx: zmq.Context) -> None:
        self.params: Params | None = None
        self.address = ADDR.format(free_port())
        self.sock = bind_socket(ctx, zmq.ROUTER, self.address)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            if not self.sock.poll(50):
                continue
            identity, *frames = self.sock.recv_multipart()
            request = ParamsRequest.from_message(decode(frames, Limits()))
            reply = encode_params(self.params) if self.params else NotModified(request.version, "").to_message()
            self.sock.send_multipart([identity, *frames_of(reply)])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.sock.close(0)


def blob(cfg) -> Params:
    from surreal.algos.ppo.policy import PPOPolicy

    policy = PPOPolicy(*env_spaces(cfg), algo_config(cfg), 0)
    return Params(BlobMeta(3, "inc"), policy.params())


@pytest.fixture
def worker() -> Iterator[tuple[InferenceServer, FakePs, str]]:
    cfg = load_config(
        ["env=Pendulum-v1", "topology.inference=central", "inference.max_batch_envs=8", "inference.max_wait_ms=60000"]
    )
    ctx = zmq.Context()
    ps = FakePs(ctx)
    address = ADDR.format(free_port())
    server = InferenceServer(ctx, cfg, address, ParamClient(ctx, [ps.address], Limits()))
    stop = StopFlag()
    thread = threading.Thread(target=server.run, args=(stop,), daemon=True)
    thread.start()
    yield server, ps, address
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    server.close()
    ps.close()
    ctx.destroy(0)


def test_requests_of_two_actors_are_one_batch_and_each_gets_its_rows(worker) -> None:
    server, ps, address = worker
    ps.params = blob(load_config(["env=Pendulum-v1"]))
    ctx = zmq.Context()
    clients = [InferenceClient(ctx, [address], actor, timeout_s=30) for actor in (0, 1)]
    replies: dict[int, object] = {}

    def act(actor: int) -> None:
        obs = np.full((4, 3), actor, np.float32)
        replies[actor] = clients[actor].act(obs, 3, "inc")

    threads = [threading.Thread(target=act, args=(a,)) for a in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Served once both were in: 8 observations fill the batch (its deadline is a minute away).
    assert server.batches == 1
    for actor in (0, 1):
        reply = replies[actor]
        assert reply.version == 3 and reply.env_actions.shape == (4, 1)
        assert set(reply.record) == {"actions", "logprobs"} and reply.record["logprobs"].shape == (4,)
        assert (np.abs(reply.env_actions) <= 2.0).all()  # Pendulum's bounds
    for client in clients:
        client.close()
    ctx.destroy(0)


def test_no_params_then_acting_and_failover_from_a_silent_worker(worker) -> None:
    server, ps, address = worker
    ctx = zmq.Context()
    silent_address = ADDR.format(free_port())
    silent = bind_socket(ctx, zmq.ROUTER, silent_address)  # takes requests, never answers
    errors: list[str] = []
    client = InferenceClient(ctx, [silent_address, address], actor=0, timeout_s=0.5, on_error=errors.append)
    obs = np.zeros((8, 3), np.float32)  # a full batch: served at once
    asked: list[bool] = []

    def stopped() -> bool:  # the actor stops after the worker's first NO_PARAMS (and the silent worker's timeout)
        asked.append(True)
        return NOT_READY in errors

    assert client.act(obs, -1, "", stopped) is None, "no actions before any parameters"
    assert errors[:2] == [INFERENCE_TIMEOUT, NOT_READY] and client.failovers == 1
    ps.params = blob(load_config(["env=Pendulum-v1"]))
    reply = client.act(obs, 3, "inc")
    assert reply is not None and reply.env_actions.shape == (8, 1) and reply.version == 3
    client.close()
    silent.close(0)
    ctx.destroy(0)


def test_surreal_run_plans_workers_only_for_central_inference_and_tells_the_actors(tmp_path) -> None:
    from surreal.launch import local
    from surreal.settings import Settings

    per_actor = local.plan_processes(load_config(["actors=2"]), tmp_path, {})
    assert not [s for s in per_actor if s.role == "inference"]
    assert all(Settings.from_env(s.env).inference_addrs == () for s in per_actor)

    cfg = load_config(["actors=2", "topology.inference=central", "topology.inference_workers=2"])
    specs = local.plan_processes(cfg, tmp_path, {})
    workers = [s for s in specs if s.role == "inference"]
    assert [s.name for s in workers] == ["inference-0", "inference-1"]
    assert all(s.restart == "always" for s in workers)
    served = [f"tcp://127.0.0.1:{Settings.from_env(s.env).inference_port}" for s in workers]
    for actor in (s for s in specs if s.role == "actor"):
        assert list(Settings.from_env(actor.env).inference_addrs) == served
    roles = [s.role for s in specs]
    assert roles.index("inference") < roles.index("actor"), "workers start before the actors that need them"


def pendulum_policies(device: str):
    """Two PPO policies of one seed and weights: one left on the CPU, one moved to `device`."""
    import torch

    from surreal.algos.ppo.policy import PPOPolicy

    cfg = load_config(["env=Pendulum-v1", "topology.inference=central"])
    spaces = env_spaces(cfg)
    cpu, moved = (PPOPolicy(*spaces, algo_config(cfg), 0) for _ in range(2))
    moved.load_params(cpu.params())
    moved.to(torch.device(device))
    return cpu, moved


def test_a_policy_moved_to_its_device_acts_as_before_and_reports_its_weights():
    """`PPOPolicy.to`, as a worker places its policy: on the CPU the very same actions, log-probabilities and
    weights as the policy that never moved (the generator is reseeded as it was)."""
    cpu, moved = pendulum_policies("cpu")
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    (a, ra), (b, rb) = cpu.act(obs), moved.act(obs)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ra["logprobs"], rb["logprobs"])
    np.testing.assert_array_equal(cpu.act_deterministic(obs), moved.act_deterministic(obs))
    for key, value in cpu.params()["policy"].items():
        np.testing.assert_array_equal(value, moved.params()["policy"][key])


def test_the_workers_device_setting():
    import torch

    from surreal.config import ConfigError
    from surreal.roles.inference import worker_device

    assert worker_device("cpu") == torch.device("cpu")
    assert worker_device("cuda:1") == torch.device("cuda", 1)
    assert worker_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="inference.device"):
        load_config(["env=Pendulum-v1", "inference.device=gpu"])


def test_cuda_worker_records_what_its_policy_sampled():
    """On a GPU the sampled actions differ from the CPU's (another generator), but what the chunk records is
    consistent: each log-probability is the CPU policy's own of the recorded action, and the mean action agrees."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("a GPU worker needs a GPU (bench/gpu.sh part1 runs this)")
    cpu, moved = pendulum_policies("cuda")
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    _, record = moved.act(obs)
    with torch.no_grad():
        dist = cpu.model.distribution(cpu._input(obs))
        expected = dist.log_prob(torch.from_numpy(record["actions"])).sum(-1).numpy()
    np.testing.assert_allclose(record["logprobs"], expected, rtol=0, atol=1e-4)
    np.testing.assert_allclose(cpu.act_deterministic(obs), moved.act_deterministic(obs), rtol=0, atol=1e-5)
