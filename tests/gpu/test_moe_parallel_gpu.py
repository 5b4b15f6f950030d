"""moe.ExpertParallelMLP on CUDA with NCCL (NVLink multicast off: NCCL_NVLS_ENABLE=0): the
gloo suite's check (tests/python/moe/ep_cases.py: output and every gradient bitwise equal
to one process holding every expert, on the same tokens) at larger shapes, world size 1
on one GPU and 2 on two (skipped with fewer); and the host syncs of one step (exactly one
in the forward, the split sizes' copy; none in the backward)."""

import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
mp = pytest.importorskip("torch.multiprocessing")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

from tests.python.moe.ep_cases import Case, free_port, run_rank  # noqa: E402

os.environ["NCCL_NVLS_ENABLE"] = "0"  # inherited by the spawned ranks
# Several 128-row tiles per expert, partial ones, 64-column tiles of the gathers.
BIG = dict(tokens=384, d=256, n=192)
CASES = {
    "k8_bias": Case(world=1, k=8, experts=16, bias=True, **BIG),
    "k2_combine": Case(world=1, k=2, experts=8, weights_at="combine", **BIG),
    "dropped": Case(world=1, k=4, experts=8, routing="dropped", activation="srelu", **BIG),
}
CASES_2 = {
    "k8_bias": Case(world=2, k=8, experts=16, bias=True, **BIG),
    "rank0_only": Case(world=2, k=2, experts=8, routing="rank0", **BIG),
    "dropped_combine": Case(world=2, k=4, experts=8, routing="dropped", weights_at="combine", **BIG),
}


@pytest.fixture(scope="module")
def seed():
    s = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed = {s}")
    return s


@pytest.mark.parametrize("name", list(CASES))
def test_one_gpu(name, seed):
    mp.spawn(run_rank, args=(CASES[name], seed, free_port(), "nccl"), nprocs=1, join=True)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("name", list(CASES_2))
def test_two_gpus(name, seed):
    mp.spawn(run_rank, args=(CASES_2[name], seed, free_port(), "nccl"), nprocs=2, join=True)


# torch's warning for each synchronizing call under set_sync_debug_mode("warn") (its other
# warnings, e.g. set_sync_debug_mode's own note on what it covers, are not syncs).
SYNC_WARNING = "called a synchronizing CUDA operation"


def _syncs(rank, port, result):
    import torch.distributed as dist
    from tilefuse import moe

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=1)
    model = moe.ExpertParallelMLP(8, 128, 128, device="cuda")
    t, k = 256, 2
    x = torch.randn(t, 128, device="cuda").to(torch.bfloat16).requires_grad_()
    ids = torch.argsort(torch.rand(t, 8, device="cuda"), dim=1)[:, :k].to(torch.int32)
    w = torch.rand(t, k, device="cuda").requires_grad_()
    dout = torch.randn(t, 128, device="cuda").to(torch.bfloat16)
    model(x, ids, w).backward(dout)  # compiles and loads every kernel first
    torch.cuda.synchronize()
    counts = []
    for step in ("forward", "backward"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            if step == "forward":
                out = model(x, ids, w)
            else:
                out.backward(dout)
            torch.cuda.set_sync_debug_mode("default")
        counts.append([f"{s.filename}:{s.lineno}" for s in seen if SYNC_WARNING in str(s.message)])
    result.put(counts)


def test_one_host_sync_per_forward():
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    p = ctx.Process(target=_syncs, args=(0, free_port(), result))
    p.start()
    counts = result.get(timeout=600)
    p.join()
    where = f"host syncs (forward, backward) at {counts}; expected the split sizes' one copy"
    assert [len(c) for c in counts] == [1, 0], where
