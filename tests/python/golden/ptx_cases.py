"""Golden PTX: the PTX of every tutorial kernel, of kernels_dsl/convert.py and of MoE kernels, for
sm_90a and sm_80, checked in under tests/python/golden/ptx/ so that a change of the
backend shows in review as a diff of the code it emits ("no codegen change" unless
intended). tests/python/test_golden_ptx.py compares; regenerate after an intended
change with

    make golden-ptx        # = python -m tests.python.golden.ptx_cases --update
"""

import argparse
import pathlib
import sys

import ml_dtypes
import numpy as np
import tilefuse.language as tl
from tilefuse import gpu

from kernels_dsl import convert
from kernels_dsl.moe import grouped_gemm as moe_gemm
from kernels_dsl.moe import quantize as moe_quantize
from kernels_dsl.tutorials import layernorm, matmul, softmax, vector_add
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel

DIR = pathlib.Path(__file__).with_name("ptx")
ARCHS = ("sm_90a", "sm_80")

f32 = np.zeros(64, np.float32)
i16 = np.zeros(64, np.int16)
i32 = np.zeros(64, np.int32)


def _mat(dtype):
    return np.zeros((64, 64), dtype)


def _matmul(dtype, bm, bn, bk, act=""):
    m = _mat(dtype)
    args = (m, m, m, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)
    return (
        matmul.matmul_kernel,
        args,
        dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION=act),
    )


def _matmul_desc(dtype, bm, bn, bk):
    m = _mat(dtype)
    args = (m, m, m, 4096, 4096, 4096, 4096, 4096, 4096)
    return matmul_desc_kernel, args, dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8)


def _convert(to, mode):
    return convert.convert_kernel, (f32, i32, i16, f32, 64), dict(TO=to, MODE=mode, BLOCK=256)


bf16, f16, e4m3 = ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn
m32 = _mat(np.float32)


def _moe_quantize(kernel, outs, consts, strides=(4096, 1), extra=()):
    # A bf16 x [4096, 4096], rowwise (strides (4096, 1)) or columnwise ((1, 4096)).
    return kernel, (_mat(bf16), *outs, 4096, 4096, *strides, *extra), consts


i8m = _mat(np.int8)


def _moe_gemm(kernel, operands, extra, consts):
    # 8 experts, 4096 rows of x (or dy), the tile schedule, N = K = 4096 (shape args).
    tiles = np.zeros((64, 2), np.int32)
    return kernel, (*operands, m32, f32, _mat(bf16), i32, i32, tiles, 8, 4096, 4096, *extra), consts


# name -> (kernel, args, constexprs, num_warps, num_stages, archs); the MoE quantizers last.
CASES = {
    "vector_add": (vector_add.add_kernel, (f32, f32, f32, 4096), dict(BLOCK_SIZE=1024), 4, 3, ARCHS),
    "softmax": (softmax.softmax_kernel, (m32, m32, 4096, 4096, 1000), dict(BLOCK_SIZE=1024), 4, 3, ARCHS),
    "layernorm_fwd": (
        layernorm._layer_norm_fwd_fused,
        (m32, m32, f32, f32, f32, f32, 4096, 4096, 1e-5),
        dict(BLOCK_SIZE=1024),
        8,
        3,
        ARCHS,
    ),
    "layernorm_bwd_dx": (
        layernorm._layer_norm_bwd_dx_fused,
        (m32, m32, m32, m32, m32, f32, f32, f32, 4096, 4096),
        dict(GROUP_SIZE_M=64, BLOCK_SIZE_N=1024),
        8,
        3,
        ARCHS,
    ),
    "layernorm_bwd_dwdb": (
        layernorm._layer_norm_bwd_dwdb,
        (m32, m32, f32, f32, 64, 4096),
        dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=128),
        4,
        3,
        ARCHS,
    ),
    "matmul_f16_64x64x32": (*_matmul(f16, 64, 64, 32), 4, 3, ARCHS),
    "matmul_bf16_128x256x64_leaky": (*_matmul(bf16, 128, 256, 64, "leaky_relu"), 8, 3, ARCHS),
    "matmul_bf16_64x64x64_w8": (*_matmul(bf16, 64, 64, 64), 8, 3, ARCHS),  # N split across warpgroups
    "matmul_e4m3_128x128x128": (*_matmul(e4m3, 128, 128, 128), 8, 4, ("sm_90a",)),
    "matmul_desc_bf16_128x256x64": (*_matmul_desc(bf16, 128, 256, 64), 8, 3, ARCHS),
    "matmul_desc_bf16_64x64x64_w8": (*_matmul_desc(bf16, 64, 64, 64), 8, 3, ARCHS),
    "convert_bf16_rne": (*_convert(tl.bfloat16, "rne"), 4, 3, ARCHS),
    "convert_f16_rtz": (*_convert(tl.float16, "rtz"), 4, 3, ARCHS),
    "convert_e4m3_rs": (*_convert(tl.float8e4nv, "rs"), 4, 3, ("sm_90a",)),
    "convert_e5m2_ru": (*_convert(tl.float8e5, "ru"), 4, 3, ("sm_90a",)),
    "moe_mxfp8_quantize_e4m3": (
        *_moe_quantize(moe_quantize.mxfp8_quantize, (i8m, i8m), dict(FMT=tl.float8e4nv, MAX_EXP=8, TR=64)),
        4,
        3,
        ("sm_90a",),
    ),
    "moe_fp8_block_quantize_128x128_cols": (
        *_moe_quantize(moe_quantize.fp8_block_quantize, (i8m, m32), dict(BR=128, TR=128), strides=(1, 4096)),
        8,
        3,
        ("sm_90a",),
    ),
    "moe_grouped_gemm_bf16_scaled_bias": (
        *_moe_gemm(
            moe_gemm.grouped_gemm_kernel,
            (_mat(bf16), _mat(bf16), i32),
            (1, 4096),
            dict(W_LIST=False, W_ALIGNED=True, BIAS=2, BM=128, BO=128, BC=64),
        ),
        8,
        3,
        ("sm_90a",),
    ),
    "moe_grouped_gemm_mxfp8": (
        *_moe_gemm(
            moe_gemm.grouped_gemm_fp8_kernel,
            (i8m, i8m, i8m, i8m),
            (4096, 0, 4096, 128, 128, 4096, 8 * 4096),
            dict(FA="e4m3", FW="e4m3", SA_ROWS=0, SW_ROWS=0, BIAS=0, BM=128, BO=128, BC=128),
        ),
        8,
        3,
        ("sm_90a",),
    ),
    "moe_grouped_wgrad_bf16": (
        moe_gemm.grouped_wgrad_kernel,
        (_mat(bf16), _mat(bf16), m32, i32, 4096, 4096),
        dict(BN=128, BK=128, BR=64),
        8,
        3,
        ("sm_90a",),
    ),
    "moe_nvfp4_quantize_rht_rs": (
        *_moe_quantize(
            moe_quantize.nvfp4_quantize,
            (f32, i8m, i8m),
            dict(BR=1, RHT=True, STOCHASTIC=True, TR=64),
            strides=(1, 4096),
            extra=(5, 0),
        ),
        4,
        3,
        ("sm_90a",),
    ),
}


def pairs():
    """Every (case name, arch) with a golden file."""
    return [(name, arch) for name, case in CASES.items() for arch in case[5]]


def path(name: str, arch: str) -> pathlib.Path:
    return DIR / f"{name}.{arch}.ptx"


def emit(name: str, arch: str) -> str:
    kernel, args, consts, warps, stages, _ = CASES[name]
    return gpu.lower(kernel.compile(*args, **consts), arch, warps, stages, keep_ir=False)["ptx"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", action="store_true", help="rewrite the golden files")
    opts = ap.parse_args(argv)
    stale = []
    for name, arch in pairs():
        ptx, p = emit(name, arch), path(name, arch)
        if opts.update:
            DIR.mkdir(exist_ok=True)
            p.write_text(ptx)
        elif not p.exists() or p.read_text() != ptx:
            stale.append(p.name)
    if opts.update:
        known = {path(n, a).name for n, a in pairs()}
        for p in DIR.glob("*.ptx"):
            if p.name not in known:
                p.unlink()
        print(f"wrote {len(pairs())} golden PTX files to {DIR}")
    elif stale:
        print("PTX differs from the golden files: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
