"""The data-parallel learner's math (`learner.replicas=K`, algos/replica.py): K ranks on gloo make the update one
learner makes on the ranks' shares put together, for PPO (an MLP, and an LSTM on whole sequences) and for the
off-policy algorithms.

Each rank is a process of its own (tests/replica_worker.py) in a gloo group on 127.0.0.1; the single learner runs
in this process on the concatenated batch. Float tolerance: the ranks' average of per-share gradient means adds up
in another order than one mean over the whole minibatch."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from replica_worker import run_case
from surreal.algos.replica import Replica
from surreal.launch.local import free_ports

WORKER = Path(__file__).resolve().parent / "replica_worker.py"
RANKS_TIMEOUT_S = 300  # only catches a hang: two processes importing torch on a busy 2-core box take seconds


def run_ranks(algo: str, size: int, tmp_path: Path) -> list[dict[str, np.ndarray]]:
    """Every rank's result of `run_case(algo, Replica(rank, size))`, each rank a process in one gloo group."""
    return run_ranks_of(WORKER, size, tmp_path, lambda rank: [algo], algo)


def run_ranks_of(
    worker: Path, size: int, tmp_path: Path, args: Callable[[int], list[str]], name: str = "group"
) -> list[dict[str, np.ndarray]]:
    """`worker` run as each rank of a gloo group of `size` on 127.0.0.1 (torchrun's variables), with `args(rank)`
    and the path of the .npz it writes; every rank's arrays."""
    port = free_ports(1)[0]
    procs = []
    for rank in range(size):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        out = tmp_path / f"{name}-rank{rank}.npz"
        procs.append((out, subprocess.Popen([sys.executable, str(worker), *args(rank), str(out)], env=env)))
    try:
        for _, proc in procs:
            assert proc.wait(timeout=RANKS_TIMEOUT_S) == 0
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [dict(np.load(out)) for out, _ in procs]


@pytest.mark.parametrize("algo", ["ppo", "ppo-lstm", "td3", "sac"])
@pytest.mark.system
def test_two_ranks_on_gloo_make_the_update_one_learner_makes_on_the_whole_batch(algo, tmp_path):
    torch.set_num_threads(1)
    alone = run_case(algo, None)
    ranks = run_ranks(algo, 2, tmp_path)
    params = [k for k in alone if k.startswith("param/")]
    assert params and all(k in ranks[0] for k in params)
    for key in params:
        # The ranks hold the very same parameters (identical averaged gradients, identical steps) ...
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key], err_msg=key)
        # ... which are the single learner's, within float tolerance.
        np.testing.assert_allclose(ranks[0][key], alone[key], rtol=1e-4, atol=2e-5, err_msg=key)
    initial = run_case(algo, None, updates=0)
    changed = [k for k in params if not np.allclose(alone[k], initial[k])]
    assert len(changed) > len(params) // 2, "the updates moved the parameters"
    # Statistics are the whole minibatch's on every rank.
    np.testing.assert_allclose(ranks[0]["stats"], ranks[1]["stats"], rtol=1e-6)
    np.testing.assert_allclose(ranks[0]["stats"], alone["stats"], rtol=1e-3, atol=1e-5)
    if algo.startswith("ppo"):  # the normalizer statistics, from the whole batch on every rank
        for key in ("obs_rms/mean", "ret_rms/var"):
            np.testing.assert_array_equal(ranks[0][key], ranks[1][key])
            np.testing.assert_allclose(ranks[0][key], alone[key], rtol=1e-12)
    else:  # each rank's priorities are its own transitions', the single learner's for those rows
        for key in (k for k in alone if k.startswith("priorities/")):
            whole = alone[key].reshape(4, 2, -1)
            for rank, result in enumerate(ranks):
                np.testing.assert_allclose(result[key], whole[:, rank].reshape(-1), rtol=1e-4, atol=1e-5)


def test_a_replica_shares_a_minibatch_evenly_in_rank_order():
    shares = [Replica(rank, 4).share(64) for rank in range(4)]
    assert [(s.start, s.stop) for s in shares] == [(0, 16), (16, 32), (32, 48), (48, 64)]
    with pytest.raises(ValueError, match="equal shares"):
        Replica(0, 3).share(64)
    with pytest.raises(ValueError, match="not in a group"):
        Replica(2, 2)


def test_a_rank_draws_its_share_of_the_noise_a_single_learner_draws():
    generator = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    whole = torch.randn((3, 8, 2), generator=generator())
    shares = [Replica(rank, 2).randn_share((3, 4, 2), 1, generator(), torch.device("cpu")) for rank in range(2)]
    torch.testing.assert_close(torch.cat(shares, 1), whole)


@pytest.mark.system
def test_a_group_process_ends_with_its_code_and_what_it_printed():
    """`end_group_process` skips the interpreter's shutdown (gloo's threads would abort it there): the exit status
    is the one given, and what the process printed into its buffered stdout still arrives."""
    script = (
        "from surreal.algos.replica import end_group_process\n"
        "print('printed before the end', end='')\n"
        "end_group_process(3)\n"
        "print('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (3, "printed before the end"), done.stderr
