"""The capacity model's per-component costs: short micro-benchmarks (`--measure`) and figures read from other
results files, each with its source.

Measured here (`actor_rate`, `learner_costs`, `shard_rates`, `ps_rates`), each the fastest of a few rounds of one
thread's CPU time (another program's load slows the wall clock and, less, the CPU time; this box is shared, say so
next to any figure). The learner's is the learner role's `LearnerCore` in-process (bench.learner's harness) on chunks
of 64 steps cut from the recorded HalfCheetah-v5 rollout, one per actor as bench.fleet sends them.

On a GPU machine (`--measure-learner cuda`, bench/gpu.sh part3): the same two PPO updates and the DDPG step on
the GPU, compiled and replayed as CUDA graphs as that part's system runs are, by the wall clock with the device
synchronized after every update (the GPU's time is not the thread's CPU time; the median round), into
`capacity-learner.<machine>.json` (`h200-16core`, ...). `load_costs` adds every such file's learner under its
GPU's name (`h200`), the device a cluster names in `learner_device`.

Read from files: the H100 learner (that machine measured none) from `bench/results/throughput.h100-16core.json`'s
1-actor point, the only H100 learner figure there is (from before the learner work): its batch over its system
rate is one update, all 320 minibatch steps' overhead (docs/benchmarks.md's diagnosis of that run), so `sample_s`
is 0, and the check lists that point as calibration (`calibrated_learner`, for any GPU machine that measured no
learner). Pixels (`--measure-pixels`, `capacity-costs-pixels.2core.json`): the Nature CNN's `LearnerCore` PPO
update under ppo-atari's rule and a FIFO shard's ingest of packed frame chunks (the simulator's, whose bytes are the
real actor's); the Atari actor's rate is bench.atari_ppo's `actor_alone` (`atari-ppo.2core.json`). Lift's actor cost
falls back to `throughput-robosuite-Lift.2core.json`'s 1-actor raw rate when
robosuite is not installed.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench._runs import RESULTS
from bench.capacity_model import Costs, LearnerCost

H100_FILE = RESULTS / "throughput.h100-16core.json"
LIFT_FILE = RESULTS / "throughput-robosuite-Lift.2core.json"
MEASURED_FILE = RESULTS / "capacity-costs.2core.json"
PIXEL_FILE = RESULTS / "capacity-costs-pixels.2core.json"
ATARI_ENV = "ALE/Pong-v5"
ATARI_PPO_FILE = RESULTS / "atari-ppo.2core.json"
FLEET_MINIBATCHES = 32  # bench.fleet's PPO rule: minibatch = batch / 32
FLEET_CHUNK = 64
DDPG_MINIBATCHES_PER_SAMPLE = 4


def calibrated_learner(file: Path) -> tuple[LearnerCost, str]:
    """A GPU learner from a throughput file's 1-actor point, for a machine that measured no learner of its own
    (see the module's docstring): its batch over its system rate is one update of 320 minibatch steps, all
    overhead (`sample_s` 0). An upper bound on the learner's cost: the point may have been bound elsewhere."""
    data = json.loads(file.read_text())
    point = min(data["points"], key=lambda p: p["actors"])
    update_s = point["batch_size"] / point["system_env_steps_per_s"]
    steps = FLEET_MINIBATCHES * 10
    source = (
        f"{file.name}: {point['actors']}-actor point, batch "
        f"{point['batch_size']} / {point['system_env_steps_per_s']} env steps/s = {update_s:.3f} s per update "
        f"over {steps} minibatch steps (calibrated: no learner measured on that machine; DDPG not measured)"
    )
    return LearnerCost(update_s / steps, 0.0, None), source


def lift_from_file() -> tuple[float, str]:
    data = json.loads(LIFT_FILE.read_text())
    point = min(data["points"], key=lambda p: p["actors"])
    rate = point["raw_env_steps_per_s"] / point["actors"]
    return rate, f"{LIFT_FILE.relative_to(RESULTS.parent.parent)}: raw rate of {point['actors']} actor, 1 env"


def learner_files(results: Path = RESULTS) -> dict[str, Path]:
    """Every `--measure-learner` file in `results`, by the device name it measured (`h200`, ...)."""
    files = sorted(results.glob("capacity-learner.*.json"))
    return {json.loads(f.read_text())["name"]: f for f in files}


def load_costs(path: Path = MEASURED_FILE, results: Path = RESULTS, pixels: Path = PIXEL_FILE) -> Costs:
    """The measured costs (`--measure`'s file), the H100 learner from its throughput file, and every learner a
    GPU machine measured (`--measure-learner`); the CPU's own `--measure` figure wins over a file's. For pixels:
    the Nature CNN learner and a shard's ingest of frame chunks (`--measure-pixels`' file, where there is one) and
    the Atari actor's rate (bench.atari_ppo's `actor_alone`)."""
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python -m bench.capacity --measure` first")
    costs = Costs.from_json(json.loads(path.read_text())["costs"])
    h100, source = calibrated_learner(H100_FILE)
    learner, sources = {"h100": h100}, {"learner h100": source}
    for name, file in learner_files(results).items():
        data = json.loads(file.read_text())
        learner[name] = LearnerCost(**data["learner"])
        sources[f"learner {name}"] = f"{file.name}: {data['source']}"
    actors = dict(costs.actor_steps_per_core)
    pixel_learner, pixel_ingest = dict(costs.pixel_learner), costs.pixel_shard_ingest_per_core
    if ATARI_ENV not in actors and ATARI_PPO_FILE.exists():
        actors[ATARI_ENV], sources[f"actor {ATARI_ENV}"] = atari_actor_from_file()
    if pixels.exists():
        data = json.loads(pixels.read_text())
        pixel_learner.update({k: LearnerCost(**v) for k, v in data["pixel_learner"].items()})
        pixel_ingest = data["pixel_shard_ingest_per_core"]
        sources.update({k: f"{pixels.name}: {v}" for k, v in data["sources"].items()})
    return replace(
        costs,
        actor_steps_per_core=actors,
        learner={**learner, **costs.learner},
        pixel_learner=pixel_learner,
        pixel_shard_ingest_per_core=pixel_ingest,
        sources={**costs.sources, **sources},
    )


# -- micro-benchmarks -----------------------------------------------------------------------------------


def round_rates(
    work: Callable[[], object], units_per_call: int, seconds: float, rounds: int, clock: Callable[[], float]
) -> list[float]:
    """`work()` once untimed, then `rounds` rounds of `seconds / rounds` of wall time each (at least 2 calls a
    round): each round's units per second of `clock`."""
    work()
    rates = []
    for _ in range(rounds):
        calls, wall0, clock0 = 0, time.perf_counter(), clock()
        while calls < 2 or time.perf_counter() - wall0 < seconds / rounds:
            work()
            calls += 1
        rates.append(calls * units_per_call / max(clock() - clock0, 1e-9))
    return rates


def cpu_rate(work: Callable[[], object], units_per_call: int, seconds: float, rounds: int = 4) -> float:
    """Units per CPU second of this thread (`round_rates`): the fastest round's rate. The model gives every
    component cores of its own; on a shared box other programs slow even the CPU time (a busy sibling
    hyperthread, a cold cache), and the fastest round is the one they slowed least."""
    return max(round_rates(work, units_per_call, seconds, rounds, time.thread_time))


def device_rate(work: Callable[[], object], units_per_call: int, seconds: float, device: str, rounds: int = 4) -> float:
    """Units per second of `work` on `device`: the CPU's by this thread's CPU time (`cpu_rate`); a GPU's by the
    wall clock, synchronized after every call so each round holds the device's whole work (the median round:
    nothing else runs on a lent GPU)."""
    if device == "cpu":
        return cpu_rate(work, units_per_call, seconds, rounds)
    import torch

    def synced() -> None:
        work()
        torch.cuda.synchronize()

    return statistics.median(round_rates(synced, units_per_call, seconds, rounds, time.perf_counter))


def actor_rate(env_id: str, seconds: float) -> float:
    """One actor's env steps per CPU second: one env and the PPO policy as an actor starts it (bench.throughput's
    raw actor, timed by CPU time here so the box's other load does not count)."""
    from bench.rollouts import ppo_actor

    envs, policy = ppo_actor(env_id, 1, 0)
    obs = [envs.reset()[0]]

    def step() -> None:
        obs[0] = envs.step(policy.act(obs[0])[0])[0]

    try:
        return cpu_rate(step, 1, seconds)
    finally:
        envs.close()


def fleet_chunks(algo: str, count: int) -> tuple[Any, list[Any]]:
    """`count` chunks of 64 steps from the recorded HalfCheetah-v5 rollout, one per actor, as bench.fleet sends."""
    from bench.fleet_actors import Recording
    from bench.rollouts import load as load_rollout
    from surreal.config import load_config
    from surreal.proto.wire import Chunk

    cfg = load_config([f"algo={algo}", "env=HalfCheetah-v5", f"actor.chunk_steps={FLEET_CHUNK}"], tasks=False)
    recording = Recording(cfg, load_rollout("HalfCheetah-v5"))
    chunks = []
    for actor in range(count):
        arrays, returns, lengths = recording.chunk(actor * FLEET_CHUNK)
        chunks.append(Chunk(arrays, 0, actor, list(returns), list(lengths)))
    return cfg, chunks


def core_overrides(device: str) -> list[str]:
    """The learner as the runs it stands for use it: the fleet's CPU learner eager, a GPU's compiled (CUDA graphs);
    no checkpoints while timed."""
    on_device = ["device=cpu"] if device == "cpu" else [f"device={device}", "learner.compile=true"]
    return [*on_device, "learner.checkpoint_interval=1000000", "learner.checkpoint_interval_s=100000"]


def ppo_update_s(batch: int, seconds: float, run_dir: Path, device: str = "cpu") -> tuple[float, Any]:
    """Seconds of one `LearnerCore` PPO update at `batch` under the fleet's rule (CPU time on the CPU, wall time
    on a GPU); the core too (its blob)."""
    from bench.learner import learner_core, one_update

    _, chunks = fleet_chunks("ppo", batch // FLEET_CHUNK)
    overrides = [
        *core_overrides(device),
        f"actor.chunk_steps={FLEET_CHUNK}",
        f"algo.batch_size={batch}",
        f"algo.minibatch_size={batch // FLEET_MINIBATCHES}",
        "algo.update_epochs=10",
    ]
    core = learner_core("ppo", overrides, chunks, [], run_dir / f"ppo-{batch}")
    return 1.0 / device_rate(lambda: one_update(core), 1, seconds, device), core


def ddpg_step_s(seconds: float, run_dir: Path, device: str = "cpu") -> float:
    """Seconds of one DDPG gradient step (256 batch) through `LearnerCore`, on samples of 4 x 256 (CPU time on
    the CPU, wall time on a GPU)."""
    from bench.learner import learner_core, one_update
    from bench.learner_workload import transition_batches

    cfg, chunks = fleet_chunks("ddpg", 16)
    k, batch = DDPG_MINIBATCHES_PER_SAMPLE, cfg.algo.batch_size
    samples = transition_batches(chunks, k * batch, 16, 1)
    overrides = [
        *core_overrides(device),
        f"learner.minibatches_per_sample={k}",
        "algo.learning_starts=0",
        f"algo.replay_ratio={1 / batch}",
    ]
    core = learner_core("ddpg", overrides, [], samples, run_dir / "ddpg")
    return 1.0 / device_rate(lambda: one_update(core), k, seconds, device)


def fifo_ingest_rate(chunks: list[Any], capacity: int, seconds: float) -> float:
    """Transitions per CPU second into a FIFO shard of `capacity`: `chunks` framed as an actor sends them, decoded
    (every field checked), stored; taken out whole at half full (untimed share: a FIFO hands chunks over whole)."""
    from surreal.proto.channels import accepting, frames_of
    from surreal.proto.codec import Limits, decode
    from surreal.proto.wire import EXPERIENCE, encode_chunk
    from surreal.replay.shard import ReplayShard

    limits = accepting(Limits(), frozenset({EXPERIENCE}))
    frames = [frames_of(encode_chunk(c, "bench")) for c in chunks]
    fifo = ReplayShard("fifo", capacity=capacity)
    turn = iter(range(1 << 62))

    def ingest() -> None:
        fifo.add(decode(frames[next(turn) % len(frames)], limits))
        if fifo.ready(capacity // 2):
            fifo.sample(capacity // 2)

    return cpu_rate(ingest, chunks[0].arrays["rewards"].size, seconds)


def shard_rates(seconds: float) -> tuple[float, float]:
    """Transitions per CPU second into a shard (`fifo_ingest_rate` of the fleet's PPO chunks) and out of one (a
    uniform shard of 65,536 HalfCheetah transitions answering samples of 4 x 256 with their frames: DDPG's egress,
    the one that gathers; a FIFO hands its chunks over whole, cheaper)."""
    from surreal.proto.channels import accepting, frames_of
    from surreal.proto.codec import Limits, decode
    from surreal.proto.wire import EXPERIENCE, encode_chunk, encode_sample_reply
    from surreal.replay.shard import ReplayShard

    ingest_rate = fifo_ingest_rate(fleet_chunks("ppo", 64)[1], 1 << 16, seconds)
    limits = accepting(Limits(), frozenset({EXPERIENCE}))
    ddpg_frames = [frames_of(encode_chunk(c, "bench")) for c in fleet_chunks("ddpg", 64)[1]]
    uniform = ReplayShard("uniform", capacity=1 << 16)
    for i in range((1 << 16) // FLEET_CHUNK):
        uniform.add(decode(ddpg_frames[i % len(ddpg_frames)], limits))
    sample = DDPG_MINIBATCHES_PER_SAMPLE * 256
    egress_rate = cpu_rate(lambda: frames_of(encode_sample_reply(uniform.sample(sample))), sample, seconds)
    return ingest_rate, egress_rate


def ps_rates(core: Any, seconds: float, clients: int = 64, depth: int = 8) -> tuple[float, float]:
    """Blob answers and "not modified" answers per CPU second of a ps replica's thread.

    A capacity is what a saturated replica answers, so the ps should never wait for the next request: each of the
    `clients` DEALERs keeps `depth` requests in flight and sends one more per answer. That does not take the box
    out of the figure: on this 2-core VM a quiet run gave 9,800-12,000 blob and 16,400-20,600 "not modified"
    answers per core-second, a run beside a learning job (load 4.4) 24,500 and 45,000, one request in flight
    10,800-16,000 and 22,900-43,600 there. A ps on a quiet box pays for wake-ups that a busy one shares among
    many requests. Measure quiet: the figure is then the pessimistic one, the one bench.fleet's ps agrees with
    (about 11,500 requests per core-second at 1,024 PPO actors), and the sizing rule errs toward more replicas."""
    import zmq

    from surreal.proto.channels import ParamPublisher, frames_of, make_socket
    from surreal.proto.wire import ParamsRequest
    from surreal.roles.ps import ParamServer

    latest = core.params_out.latest
    ctx = zmq.Context()
    publisher = ParamPublisher(ctx, "inproc://capacity-learner")
    ps = ParamServer(ctx, "inproc://capacity-learner", "inproc://capacity-ps")
    dealers = [make_socket(ctx, zmq.DEALER) for _ in range(clients)]
    poller = zmq.Poller()
    for d in dealers:
        d.connect("inproc://capacity-ps")
        poller.register(d, zmq.POLLIN)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            ps.poll_once(0.01)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while ps.core.version != latest.blob.version and time.monotonic() < deadline:
            publisher.publish(latest.blob, latest.arrays)
            time.sleep(0.05)
        if ps.core.version != latest.blob.version:
            raise RuntimeError("the ps replica never took the blob in")
        rates = []
        for have in (ParamsRequest(-1, ""), ParamsRequest(latest.blob.version, latest.blob.incarnation)):
            request = frames_of(have.to_message())
            for d in dealers:  # fill the pipeline before the clock starts
                for _ in range(depth):
                    d.send_multipart(request, copy=False)
            answered, wall0 = 0, time.perf_counter()
            base = _thread_cpu_mark(thread)
            while time.perf_counter() - wall0 < seconds:
                for d, _ in poller.poll(5000):  # blocks (the GIL released) until an answer is there
                    for _ in range(depth):  # what this DEALER has now, at most its requests in flight
                        if not d.poll(0):
                            break
                        d.recv_multipart(copy=False)
                        d.send_multipart(request, copy=False)
                        answered += 1
            rates.append(answered / max(_thread_cpu_mark(thread) - base, 1e-9))
            for d in dealers:  # drain: every DEALER still has `depth` requests in flight
                for _ in range(depth):
                    if not d.poll(5000):
                        raise RuntimeError("the ps replica stopped answering")
                    d.recv_multipart(copy=False)
        return rates[0], rates[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for d in dealers:
            d.close(0)
        publisher.close()
        ps.close()
        ctx.term()


def _thread_cpu_mark(thread: threading.Thread) -> float:
    """CPU seconds `thread` has used so far (Linux: its /proc task's utime + stime)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/self/task/{thread.native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


PPO_BATCHES = (2048, 32768)  # two batches under the fleet's rule: per-step and per-sample costs


def step_and_sample_s(
    t_small: float, t_big: float, batches: tuple[int, int], minibatches: int, epochs: int
) -> tuple[float, float]:
    """`step_s` and `sample_s` from an update's seconds at two batches under one rule (`minibatches` a batch,
    `epochs`): t = steps x (step_s + sample_s x minibatch) at the two minibatch sizes."""
    steps = minibatches * epochs
    mb_small, mb_big = batches[0] // minibatches, batches[1] // minibatches
    sample_s = (t_big - t_small) / steps / (mb_big - mb_small)
    return t_small / steps - sample_s * mb_small, sample_s


def learner_costs(device: str, seconds: float, run_dir: Path) -> tuple[LearnerCost, Any, dict[str, Any]]:
    """The learner's cost on `device`: PPO updates at two batches under the fleet's rule (minibatch = batch / 32,
    10 epochs), solved for the per-step and per-sample terms, and DDPG's gradient step; the PPO core (for its
    blob) and the raw timings too. One torch thread, as the learner role runs."""
    import torch

    torch.set_num_threads(1)
    small, big = PPO_BATCHES
    t_small, _ = ppo_update_s(small, seconds, run_dir, device)
    t_big, core = ppo_update_s(big, seconds, run_dir, device)
    step_s, sample_s = step_and_sample_s(t_small, t_big, PPO_BATCHES, FLEET_MINIBATCHES, 10)
    ddpg_s = ddpg_step_s(seconds, run_dir, device)
    raw = {
        "ppo_update_s": {str(small): round(t_small, 4), str(big): round(t_big, 4)},
        "ddpg_step_ms": round(1e3 * ddpg_s, 3),
    }
    return LearnerCost(step_s, sample_s, ddpg_s), core, raw


def measure_learner(device: str, seconds: float = 3.0) -> dict[str, Any]:
    """`--measure-learner`'s file: the learner's cost on this machine's `device`, under its GPU's name."""
    import torch

    from bench.learner import machine_tag

    tag = machine_tag(torch.device(device))
    with tempfile.TemporaryDirectory() as tmp:
        learner, _, raw = learner_costs(device, seconds, Path(tmp))
    return {
        "benchmark": "capacity-learner",
        "machine": tag,
        "device": device,
        "name": "cpu" if device == "cpu" else tag.split("-")[0],  # what a cluster's `learner_device` calls it
        "learner": vars(learner),
        "raw": raw,
        "source": f"--measure-learner {device}: LearnerCore PPO update at batches {PPO_BATCHES[0]} and "
        f"{PPO_BATCHES[1]} (minibatch batch/32, 10 epochs) and DDPG's gradient step of 256, "
        + ("CPU time" if device == "cpu" else "compiled, CUDA graphs, wall time, synchronized"),
    }


def measure(seconds: float = 3.0) -> dict[str, Any]:
    """Every micro-benchmark, short; returns the `--measure` file's content (costs, raw figures, timings)."""
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    actors = {"HalfCheetah-v5": actor_rate("HalfCheetah-v5", seconds)}
    sources["actor HalfCheetah-v5"] = "--measure: env + PPO policy stepping, 1 env, CPU time"
    try:
        import robosuite  # noqa: F401

        actors["robosuite:Lift"] = actor_rate("robosuite:Lift", seconds)
        sources["actor robosuite:Lift"] = "--measure: env + PPO policy stepping, 1 env, CPU time"
    except ImportError:
        actors["robosuite:Lift"], sources["actor robosuite:Lift"] = lift_from_file()
    with tempfile.TemporaryDirectory() as tmp:
        learner, core, raw["learner"] = learner_costs("cpu", seconds, Path(tmp))
        sources["learner cpu"] = (
            f"--measure: LearnerCore PPO update, CPU time, batches {PPO_BATCHES[0]} and {PPO_BATCHES[1]} (minibatch "
            "batch/32, 10 epochs, chunks of 64 from the HalfCheetah-v5 recording); DDPG gradient step of 256, "
            "samples of 4"
        )
        ingest, egress = shard_rates(seconds)
        sources["replay shard"] = "--measure: ReplayShard in-process, decode + store / sample + frame, CPU time"
        checks_blob, checks_nm = ps_rates(core, seconds)
        sources["ps"] = "--measure: ParamServer on inproc sockets, 64 DEALERs x 8 requests in flight, its thread's CPU"
    costs = Costs(
        actor_steps_per_core={k: round(v, 1) for k, v in actors.items()},
        learner={"cpu": learner},
        shard_ingest_per_core=round(ingest, 1),
        shard_egress_per_core=round(egress, 1),
        ps_checks_per_core=round(checks_nm, 1),
        ps_fetches_per_core=round(checks_blob, 1),
        sources=sources,
    )
    raw["seconds"] = round(time.perf_counter() - started, 1)
    raw["load_avg_1m"] = [round(os.getloadavg()[0], 2), round(load_before, 2)]  # after, before
    return {"costs": costs.to_json(), "raw": raw}


# -- pixels: Atari's Nature CNN learner and a shard's ingest of frame chunks ----------------------------------

ATARI_SKIP = 4  # emulator frames an env step
PIXEL_BATCHES = (512, 1024)  # ppo-atari's rule (4 minibatches, 4 epochs) at two batches: per-step and per-sample
PIXEL_MINIBATCHES, PIXEL_EPOCHS = 4, 4


def atari_actor_from_file(file: Path = ATARI_PPO_FILE) -> tuple[float, str]:
    """One Atari actor's env steps/s on one core: bench.atari_ppo's `actor_alone` (one process pinned to one core
    stepping the preset's 8 envs of Pong and acting with the Nature CNN, collecting packed chunks), frames / 4."""
    data = json.loads(file.read_text())
    rate = data["actor_alone_frames_per_s"] / ATARI_SKIP
    return rate, (
        f"{file.name}: actor_alone {data['actor_alone_frames_per_s']} emulator frames/s / {ATARI_SKIP} "
        f"(one core, the preset's 8 envs, the Nature CNN acting; {data['machine']})"
    )


def pixel_chunks(count: int, steps: int = 128, envs: int = 8) -> tuple[Any, list[Any]]:
    """`count` chunks of Pong's shape (4 stacked 84x84 frames, 6 actions) packed as an actor packs them: the
    simulator's scripted chunks (sim/nodes.py, each frame once, episodes of 200 steps), whose bytes are the real
    actor's; the experiment's config too (preset ppo-atari)."""
    import numpy as np
    from gymnasium import spaces

    from surreal.algos import get_algorithm
    from surreal.config import algo_config, load_config
    from surreal.sim.nodes import ScriptedChunks

    cfg = load_config(
        ["preset=ppo-atari", f"env={ATARI_ENV}", f"actor.chunk_steps={steps}", f"topology.envs_per_actor={envs}"],
        tasks=False,
    )
    obs_space, act_space = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6)
    fields = get_algorithm("ppo").chunk_fields(obs_space, act_space, algo_config(cfg))
    scripted = ScriptedChunks(fields, steps, envs, pairs=False)
    return cfg, [scripted.chunk(actor, 0, 0) for actor in range(count)]


def pixel_update_s(batch: int, run_dir: Path, rounds: int) -> tuple[float, float]:
    """Seconds of one `LearnerCore` PPO update of the Nature CNN at `batch` (chunks of up to 128 x 8: the batch's
    transitions exactly, as the learner takes whole chunks) under the preset's
    rule (4 minibatches, 4 epochs): CPU time of this thread (the cost) and wall time (what the box's other load
    added), each the least of `rounds` rounds of two updates, after one untimed."""
    from bench.learner import learner_core, one_update

    envs = 8
    steps = min(128, batch // envs)
    _, chunks = pixel_chunks(batch // (steps * envs), steps, envs)
    overrides = [
        *core_overrides("cpu"),
        "preset=ppo-atari",
        f"env={ATARI_ENV}",
        f"actor.chunk_steps={steps}",
        f"topology.envs_per_actor={envs}",
        f"algo.batch_size={batch}",
        f"algo.minibatch_size={batch // PIXEL_MINIBATCHES}",
        f"algo.update_epochs={PIXEL_EPOCHS}",
    ]
    core = learner_core("ppo", overrides, chunks, [], run_dir / f"ppo-pixels-{batch}")
    one_update(core)
    cpu, wall = [], []
    for _ in range(rounds):
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        one_update(core)
        one_update(core)
        cpu.append((time.thread_time() - cpu0) / 2)
        wall.append((time.perf_counter() - wall0) / 2)
    return min(cpu), min(wall)


def pixel_terms(t_small: float, t_big: float) -> tuple[float, float]:
    """`step_s` and `sample_s` from updates at PIXEL_BATCHES. A convolution's time per sample grows with the
    minibatch on a CPU (its activations leave the caches), which can put the fitted per-step term below zero;
    then the step's overhead is taken as nothing and the sample's cost is the larger batch's (the preset's), the
    batch a cluster of the preset runs, exactly."""
    step_s, sample_s = step_and_sample_s(t_small, t_big, PIXEL_BATCHES, PIXEL_MINIBATCHES, PIXEL_EPOCHS)
    if step_s < 0:
        return 0.0, t_big / (PIXEL_MINIBATCHES * PIXEL_EPOCHS) / (PIXEL_BATCHES[1] // PIXEL_MINIBATCHES)
    return step_s, sample_s


def measure_pixels(seconds: float = 3.0, rounds: int = 2) -> dict[str, Any]:
    """`--measure-pixels`' file: the Nature CNN learner's cost on this CPU (one torch thread, as the learner role)
    and a shard's ingest of packed frame chunks."""
    import torch

    torch.set_num_threads(1)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    small, big = PIXEL_BATCHES
    with tempfile.TemporaryDirectory() as tmp:
        t_small, wall_small = pixel_update_s(small, Path(tmp), rounds)
        t_big, wall_big = pixel_update_s(big, Path(tmp), rounds)
    step_s, sample_s = pixel_terms(t_small, t_big)
    ingest = fifo_ingest_rate(pixel_chunks(8)[1], 1 << 14, seconds)  # packed Pong chunks, 128 x 8
    return {
        "benchmark": "capacity-costs-pixels",
        "pixel_learner": {"cpu": {"step_s": step_s, "sample_s": sample_s, "ddpg_step_s": None}},
        "pixel_shard_ingest_per_core": round(ingest, 1),
        "sources": {
            "pixel learner cpu": f"--measure-pixels: LearnerCore PPO update of the Nature CNN (preset ppo-atari: 4 "
            f"minibatches, 4 epochs) at batches {small} and {big} of packed Pong-shaped chunks, CPU time of one "
            "thread, the least of two rounds of two updates (pixel_terms: per step and per sample)",
            "pixel replay shard": "--measure-pixels: ReplayShard FIFO in-process, decode + store of packed chunks "
            "(128 x 8, each frame once), CPU time",
        },
        "raw": {
            "ppo_update_s": {str(small): round(t_small, 3), str(big): round(t_big, 3)},
            "ppo_update_wall_s": {str(small): round(wall_small, 3), str(big): round(wall_big, 3)},
            "seconds": round(time.perf_counter() - started, 1),
            "load_avg_1m": [round(os.getloadavg()[0], 2), round(load_before, 2)],  # after, before
        },
    }
