"""The grouped GEMM kernels as the host API launches them with its GPU config (the
forward with each bias kind, both weight forms, MXFP8 and FP8-block operands; the dgrad
and the wgrad, also on MXFP8 and FP8-block; the schedule kernels) lower for
sm_90a to PTX that ptxas accepts, with every K loop on pipelined wgmma (cp.async into a
ring of stages) and no missed fast path (TILEFUSE_PERF_HINTS)."""

import re
import shutil

import numpy as np
import pytest
from tilefuse import gpu, moe

from kernels_dsl.moe import grouped_gemm as kernels
from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe.gemm_reference import BF16

CHECKED = set()  # (compiled kernel, warps, stages) of schedule kernels that passed
GEMMS = (
    "grouped_gemm_kernel",
    "grouped_wgrad_kernel",
    "grouped_wgrad_persistent_kernel",
    "grouped_gemm_fp8_kernel",
    "grouped_wgrad_fp8_kernel",
)


class Recorder:
    """Stands in for a kernel in kernels_dsl.moe.grouped_gemm: records each launch instead
    of running it (the host API never reads what its kernels write)."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        return lambda *args, **meta: self.seen.append((self.kernel, args, meta))


def launches(monkeypatch, call):
    seen = []
    for name in ("group_offsets", "group_tiles", *GEMMS):
        monkeypatch.setattr(kernels, name, Recorder(getattr(kernels, name), seen))
    call()
    return seen


rng = np.random.default_rng()
# N = 512: whole FP8 128-blocks per expert; K, N and G·N: scale rows of 16 MXFP8 codes and
# more (row strides that the launch specializes as multiples of 16).
R, K, N, G = 256, 512, 512, 4
x, dy = (rng.standard_normal(s).astype(BF16) for s in ((R, K), (R, N)))
w = rng.standard_normal((G, N, K)).astype(BF16)
splits = np.array([100, 0, 120, 0], np.int32)
bias, probs = rng.standard_normal((G, N)).astype(np.float32), rng.random(R).astype(np.float32)
w2 = w.reshape(G * N, K)
qx, qw, qd, qw_t = (
    moe.quantize(x, "mxfp8"),
    moe.quantize(w2, "mxfp8", fmt="e5m2"),
    moe.quantize(dy, "mxfp8"),
    moe.quantize(w2, "mxfp8", axis=0),
)
bx, bw, bd, bw_t = (
    moe.quantize(x, "fp8_block"),
    moe.quantize(w2, "fp8_block", block=(128, 128)),
    moe.quantize(dy, "fp8_block"),
    moe.quantize(w2, "fp8_block", block=(128, 128), axis=0),
)
# The wgrads' columnwise copies (each group from a block boundary in the MLP's layout).
cols = {r: (moe.quantize(dy, r, axis=0), moe.quantize(x, r, axis=0)) for r in ("mxfp8", "fp8_block")}
CALLS = {
    "forward": lambda c: moe.grouped_gemm(x, w, splits, config=c),
    "forward_list": lambda c: moe.grouped_gemm(x, list(w), splits, config=c),
    "forward_bias": lambda c: moe.grouped_gemm(x, w, splits, bias, config=c),
    "forward_scaled_bias_fp32": lambda c: moe.grouped_gemm(x, w, splits, bias, probs, out_dtype="float32", config=c),
    "dgrad": lambda c: moe.grouped_gemm_dgrad(dy, w, splits, config=c),
    "dgrad_list": lambda c: moe.grouped_gemm_dgrad(dy, list(w), splits, config=c),
    "wgrad": lambda c: moe.grouped_gemm_wgrad(dy, x, splits, config=c),
    "wgrad_persistent": lambda c: moe.grouped_gemm_wgrad(dy, x, splits, config=c._replace(persistent=True)),
    "wgrad_persistent_ws": lambda c: moe.grouped_gemm_wgrad(dy, x, splits, config=c._replace(warp_specialize=1)),
    "forward_mxfp8": lambda c: moe.grouped_gemm(qx, qw, splits, config=c),
    "forward_mxfp8_scaled_bias": lambda c: moe.grouped_gemm(qx, qw, splits, bias, probs, config=c),
    "forward_fp8_block": lambda c: moe.grouped_gemm(bx, bw, splits, config=c),
    "dgrad_mxfp8": lambda c: moe.grouped_gemm_dgrad(qd, qw_t, splits, config=c),
    "dgrad_fp8_block": lambda c: moe.grouped_gemm_dgrad(bd, bw_t, splits, config=c),
    "wgrad_fp32": lambda c: moe.grouped_gemm_wgrad(dy, x, splits, out_dtype="float32", config=c),
    "wgrad_mxfp8": lambda c: moe.grouped_gemm_wgrad(*cols["mxfp8"], splits, config=c),
    "wgrad_fp8_block": lambda c: moe.grouped_gemm_wgrad(*cols["fp8_block"], splits, config=c),
}


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("cfg", [moe.GemmConfig(), moe.GemmConfig(128, 256, 128, 8, 3)], ids=["default", "bk128"])
@pytest.mark.parametrize("call", CALLS)
def test_kernels_are_on_the_fast_path(monkeypatch, tmp_path, call, cfg):
    seen = launches(monkeypatch, lambda: CALLS[call](cfg))
    assert "group_offsets" in {k.__name__ for k, _, _ in seen}
    for kernel, args, meta in seen:
        warps, stages = meta.pop("num_warps", 4), meta.pop("num_stages", 3)
        compiled = kernel.compile(*args, **meta)
        if (compiled, warps, stages) in CHECKED:  # the schedule kernels recur: checked once
            continue
        low = gpu.lower(compiled, "sm_90a", warps, stages, keep_ir=False)
        assert low["hints"] == [], (kernel.__name__, low["hints"])
        assert_assembles(low["ptx"], "sm_90a", tmp_path)
        if kernel.__name__ not in GEMMS:
            CHECKED.add((compiled, warps, stages))
        if kernel.__name__ in GEMMS:
            types = {
                "forward_mxfp8": "k32.f32.e4m3.e5m2",
                "dgrad_mxfp8": "k32.f32.e4m3.e4m3",
                "wgrad_mxfp8": "k32.f32.e4m3.e4m3",
                "fp8_block": "k32.f32.e4m3.e4m3",
            }
            mma = next((v for key, v in types.items() if key in call), "k16.f32.bf16.bf16")
            assert f"wgmma.mma_async.sync.aligned.m64n{cfg.block_n}{mma}" in low["ptx"]
            # The persistent wgrad's K steps are TMA copies (its masked last step: loads), and
            # so are FP8-block's forward and dgrad at K steps up to 128 (fp8_descriptors).
            tma = "persistent" in call or ("fp8_block" in call and "wgrad" not in call and cfg.block_k <= 128)
            copy = "cp.async.bulk.tensor" if tma else "cp.async.cg.shared.global"
            assert copy in low["ptx"]
            assert ("setmaxnreg" in low["ptx"]) == call.endswith("_ws")  # a producer warpgroup
            # The bf16 wgrad reads dy as it lies: A = dy's tileᵀ, M-major (imm-trans-a 1).
            if call.startswith("wgrad") and "mxfp8" not in call and "fp8_block" not in call:
                mmas = re.findall(r"wgmma\.mma_async[^;]*;", low["ptx"])
                assert mmas and all(m.endswith("p, 1, 1, 1, 1;") for m in mmas)


def _fp8_ptx(monkeypatch, call, cfg):
    return next(ptx for name, ptx in gemm_ptx(monkeypatch, call, cfg) if name == "grouped_gemm_fp8_kernel")


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
def test_mxfp8_promotion_overlaps_the_next_chunk(monkeypatch, tmp_path):
    """MXFP8's K step of the default config (two 32-blocks of their own scales): chunk 2's
    wgmma group is in flight while chunk 1 is promoted (wait_group 1), every row's and
    column's scale is read once per chunk, decoded (a thread of a 64 x 128 warpgroup
    fragment holds 2 rows and 32 columns: 34 fp32 reads, 68 for two chunks), each slot
    promoted by one FFMA, and ptxas keeps the wgmma pipeline without spilling."""
    ptx = _fp8_ptx(monkeypatch, "forward_mxfp8", moe.GemmConfig())
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 1
    assert ptx.count("ld.shared.f32") == 2 * 34, ptx.count("ld.shared.f32")
    assert ptx.count("fma.rn.f32") == 2 * 64, ptx.count("fma.rn.f32")
    report = assert_assembles(ptx, "sm_90a", tmp_path, verbose=True)
    assert "C7511" not in report and "0 bytes spill stores" in report, report


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("call", ["forward_fp8_block", "dgrad_fp8_block"])
@pytest.mark.parametrize("block_k", [64, 128])
def test_fp8_block_promotes_once_per_step(monkeypatch, tmp_path, call, block_k):
    """FP8-block's scales are one per row for a whole 128-block, broadcast along K to
    dot_scaled's 32-blocks (B's one scalar, a tile's columns lying in one 128-block of
    Wq): the compiler sees the broadcast and promotes the K step's partial sum once (the
    default 64 and 128 of K: one wgmma group, waited with wait_group 0, one FFMA per
    slot times the row's scale and B's), reading each row's scale from the registers that loaded it (plan-layouts gives
    the scale loads the accumulator's rows): no scale table in shared memory."""
    ptx = _fp8_ptx(monkeypatch, call, moe.GemmConfig(128, 128, block_k, 8, 3))
    assert "wgmma.wait_group.sync.aligned 1;" not in ptx
    assert "ld.shared.f32" not in ptx and "st.shared.v2.f32" not in ptx
    # The two row scales of a thread times B's one: two FMULs, then one FFMA a slot.
    assert ptx.count("fma.rn.f32") == 64 and ptx.count("mul.rn.f32") == 2, ptx.count("mul.rn.f32")
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3") == block_k // 32
    report = assert_assembles(ptx, "sm_90a", tmp_path, verbose=True)
    assert "C7511" not in report and "0 bytes spill stores" in report, report


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("call", ["forward_fp8_block", "dgrad_fp8_block"])
def test_fp8_block_steps_of_two_blocks_overlap(monkeypatch, tmp_path, call):
    """FP8-block at K steps of 256: the scale codes repeat in runs of four 32-blocks (a
    broadcast of each 128-block's scale), so the step promotes two 128-chunks, the
    second's wgmma group in flight while the first is promoted (wait_group 1), one FFMA
    a slot each; no spill, no serialized wgmma."""
    ptx = _fp8_ptx(monkeypatch, call, moe.GemmConfig(128, 128, 256, 8, 2))
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 1
    assert ptx.count("fma.rn.f32") == 2 * 64, ptx.count("fma.rn.f32")
    report = assert_assembles(ptx, "sm_90a", tmp_path, verbose=True)
    assert "C7514" not in report and "0 bytes spill stores" in report, report


# The configs the host launches when a call passes none: the default, and on sm_90a the
# tuned table's entry for each op it serves (moe.tuned).
HOST_CONFIGS = {
    "forward": ("fwd bf16", "default"),
    "dgrad": ("dgrad bf16", "default"),
    "wgrad": ("wgrad bf16", "default"),
    "wgrad_persistent": ("wgrad bf16", "default"),
    "forward_mxfp8": ("fwd mxfp8", "default"),
    "forward_fp8_block": ("fwd fp8_block", "default"),
    "dgrad_mxfp8": (None, "default"),
    "dgrad_fp8_block": ("dgrad fp8_block", "default"),
    "wgrad_mxfp8": (None, "default"),
    "wgrad_fp8_block": (None, "default"),
}


def host_config_cases():
    """(call, config) pairs: each library GEMM at every config the host may pick for it."""
    import importlib

    from tilefuse.moe import tuned

    host = importlib.import_module("tilefuse.moe.grouped_gemm")
    cases = []
    for call, (op, _) in HOST_CONFIGS.items():
        cfgs = {moe.GemmConfig()} | (
            {host.FP8_BLOCK_CONFIG} if call in ("forward_fp8_block", "dgrad_fp8_block") else set()
        )
        for e in (tuned.table("sm_90a") or {}).get("entries", []):
            if e["op"] == op:
                cfgs.add(moe.GemmConfig(*e["config"]))
        cases += [(call, c) for c in sorted(cfgs, key=str)]
    return cases


def case_id(v):
    if isinstance(v, str):
        return v
    return "x".join(map(str, v[:3])) + ("", "ws", "pp")[int(v.warp_specialize)] + ("p" if v.persistent else "")


def gemm_ptx(monkeypatch, call, cfg):
    """[(kernel name, PTX)] of the GEMM kernels `call` launches at `cfg`, for sm_90a."""
    out = []
    for kernel, args, meta in launches(monkeypatch, lambda: CALLS[call](cfg)):
        if kernel.__name__ in GEMMS:
            warps, stages = meta.pop("num_warps", 4), meta.pop("num_stages", 3)
            ptx = gpu.lower(kernel.compile(*args, **meta), "sm_90a", warps, stages, keep_ir=False)["ptx"]
            out.append((kernel.__name__, ptx))
    return out


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("call,cfg", host_config_cases(), ids=case_id)
def test_host_configs_do_not_spill(monkeypatch, tmp_path, call, cfg):
    """No local-memory spills in the library GEMMs at the tiles the host launches (a 128 x 256
    fp8 dot per tile would spill: 128 accumulator and 128 partial-sum slots per thread; the
    FP8-block 128 x 256 tiles the host picks are persistent, two dots of 128 columns)."""
    for name, ptx in gemm_ptx(monkeypatch, call, cfg):
        report = assert_assembles(ptx, "sm_90a", tmp_path, verbose=True)
        assert "0 bytes spill stores" in report and "C7514" not in report, (name, report)


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("call", ["forward_fp8_block", "dgrad_fp8_block"])
def test_fp8_block_ws_consumers_do_not_meet(monkeypatch, tmp_path, call):
    """The warp-specialized FP8-block GEMM: between a consumer's wait for a K step's copies
    and its release of the stage, no barrier (the scales in registers, no table staged in
    shared memory), so its two consumer warpgroups drift apart and one's promotion runs
    while the other's wgmma keep the tensor cores busy; no spill."""
    ptx = _fp8_ptx(monkeypatch, call, moe.GemmConfig(128, 128, 128, 8, 4, warp_specialize=1))
    first = ptx.index("wgmma.mma_async")
    step = ptx[ptx.rindex("mbarrier.try_wait", 0, first) : ptx.index("mbarrier.arrive", first)]
    assert "bar.sync" not in step and "bar.arrive" not in step and "ld.shared.f32" not in step
    report = assert_assembles(ptx, "sm_90a", tmp_path, verbose=True)
    assert "C7514" not in report and "0 bytes spill stores" in report, report
