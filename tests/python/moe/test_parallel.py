"""moe.ExpertParallelMLP with torch.distributed's gloo backend on the CPU (the interpreter),
world sizes 1, 2 and 4 in spawned processes: the output and every gradient (dx, the
routing weights', each rank's expert weights' and biases') bitwise equal to a
single-process run holding every expert (ep_cases.reference) on the same tokens. Bitwise
holds because each row's MLP result depends on that row and its expert only, and each
expert's rows reach it in the single process's order (by source rank, then token), so its
per-expert sums (dW, db) add the same terms in the same order on the interpreter.

Needs torch (skipped without it: CI has none)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
mp = pytest.importorskip("torch.multiprocessing")

from tests.python.moe.ep_cases import Case, bad_input, free_port, run_rank  # noqa: E402

CASES = {
    "w1": Case(world=1, tokens=12, k=2, experts=4),
    "w2": Case(world=2, tokens=10, k=2, experts=4, bias=True),
    "w2_k8": Case(world=2, tokens=6, k=8, experts=8, activation="srelu"),
    "w2_k1_combine": Case(world=2, tokens=9, k=1, experts=4, weights_at="combine"),
    "w2_rank0_only": Case(world=2, tokens=7, k=2, experts=4, routing="rank0"),
    "w2_dropped": Case(world=2, tokens=8, k=2, experts=6, routing="dropped", weights_at="combine"),
    "w4": Case(world=4, tokens=5, k=2, experts=8, bias=True),
}


@pytest.fixture(scope="module")
def seed():
    s = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed = {s}")
    return s


@pytest.mark.parametrize("name", list(CASES))
def test_against_single_process(name, seed):
    case = CASES[name]
    mp.spawn(run_rank, args=(case, seed, free_port(), "gloo"), nprocs=case.world, join=True)


def test_needs_a_process_group():
    from tilefuse import moe

    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        moe.ExpertParallelMLP(4, 32, 32)


def test_bad_input():
    mp.spawn(bad_input, args=(free_port(),), nprocs=1, join=True)
