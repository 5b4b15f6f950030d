"""Writes docs/language.md: every name of Triton's `triton.language` and whether
`tilefuse.language` has it (checked by importing it, so the table cannot drift:
tests/python/test_language_table.py fails when the file is stale).

    python scripts/language_table.py          # rewrite docs/language.md
    python scripts/language_table.py --check  # exit 1 if it is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

# `__all__` of Triton's python/triton/language/__init__.py on its main branch of the 3.x line, as
# intel/intel-xpu-backend-for-triton carries it at commit 2700f94ef4cb (with tl.topk and tl.tuple).
TRITON_NAMES = """
PropagateNan TRITON_MAX_TENSOR_NUMEL load_tensor_descriptor store_tensor_descriptor make_tensor_descriptor
tensor_descriptor abs add advance arange argmax argmin associative_scan assume atomic_add atomic_and atomic_cas
atomic_max atomic_min atomic_or atomic_xchg atomic_xor bfloat16 bitonic_merge block_type broadcast broadcast_to cat
cast cdiv ceil clamp const constexpr constexpr_function cos cumprod cumsum debug_barrier device_assert device_print
div_rn dot dot_scaled dtype erf exp exp2 expand_dims extra fdiv flip float16 float32 float64 float8e4b15 float8e4nv
float8e4b8 float8e5 float8e5b16 floor fma full gather histogram inline_asm_elementwise interleave int1 int16 int32
int64 int8 join load log log2 make_block_ptr math max max_constancy max_contiguous maximum min minimum multiple_of
num_programs pair_uniform_to_normal permute philox philox_impl pi32_t pointer_type program_id rand rand4x randint
randint4x randn randn4x range ravel reduce reduce_or reshape rsqrt slice sigmoid sin softmax sort split sqrt sqrt_rn
static_assert static_print static_range store sum swizzle2d tensor topk trans tuple uint16 uint32 uint64 uint8
uint_to_uniform_float umulhi view void warp_id where xor_sum zeros zeros_like
""".split()

# Why a name is missing. Issue 16 is "Triton's language, complete"; "part N" is its item.
MISSING = {
    "topk": "issue 16 part 4",
    "bitonic_merge": "issue 16 part 4",
    "float8e4b8": "an AMD format (fnuz); NVIDIA GPUs have no arithmetic on it",
    "float8e5b16": "an AMD format (fnuz); NVIDIA GPUs have no arithmetic on it",
    "block_type": "a type object of Triton's frontend; tilefuse's tile types live in the C++ IR",
    "const": "const pointers: not yet",
    "void": "a type of Triton's frontend, not used in kernels",
    "slice": "not yet: tiles are indexed with ':' and None",
    "inline_asm_elementwise": "not planned: PTX text has no meaning on the interpreter",
    "max_constancy": "not yet (tl.multiple_of and tl.max_contiguous are there)",
    "warp_id": "not yet",
}

# What differs for names that are there.
NOTES = {
    "range": "warp_specialize=True: a TMA producer warpgroup, num_consumer_groups=2: ping-pong consumers (sm_90a; "
    "docs/guide/kernels.md); num_stages, loop_unroll_factor, flatten accepted, unused",
    "atomic_cas": "16-, 32- and 64-bit elements, floats compared by their bits; on the GPU sem and scope are in the "
    "atom, as Triton's PTX spells it (atom.global.acq_rel.gpu.cas.b32)",
    "atomic_max": "floats as Triton: on their bits (signed max for values >= 0, unsigned min below; "
    "atom.global.gpu.acq_rel.max.s32)",
    "atomic_min": "floats as Triton: on their bits (signed min for values >= 0, unsigned max below)",
    "load": "cache_modifier (.ca .cg .cv), eviction_policy (evict_first, evict_last: with an L2 policy of that "
    "priority) and volatile go into the ld as Triton's PTX writes them (ld.global.cg.v4.b32); one kind per load "
    "(PTX takes no two); loads pipelined into a dot loop's cp.async / TMA copies keep those copies' own caching",
    "store": "cache_modifier (.wb .cg .cs .wt) and eviction_policy go into the st, as for load",
    "make_block_ptr": "lowered to a tile of pointers and masks of the checked dims (the GPU vectorizes and "
    "pipelines it as pointer code); loops carry only its offsets",
    "cat": "1-D tiles of one type, can_reorder=True as Triton demands; the result keeps the order (input, other)",
    "dot": "2-D and 3-D; input_precision defaults to ieee (f32 products on FMAs); tf32 and tf32x3 round the "
    "operands to tf32 in the IR, and the GPU takes those dots on mma.sync m16n8k8 (M, N multiples of 16, K of 8); "
    "out_dtype=float16 accumulates f16 and fp8 products in f16 (wgmma's f16 form on sm_90a); float8e4b15 "
    "operands are converted to f16 (exactly) first",
    "tuple": "builtins.tuple: tuples are carried by loops and ifs, passed to and returned from @jit helpers, and "
    "passed at launch (tuples and NamedTuples of tensors and scalars, nested: one kernel argument per leaf; the "
    "structure is part of the specialization; GPU launches with them take the full launch path, not the C++ "
    "fast path)",
    "pi32_t": "pointer_type(int32); pointers stored through an int64 pointer store their addresses, as Triton",
    "constexpr_function": "called at compile time on compile-time values",
    "add": "sanitize_overflow is accepted; integer overflow wraps",
    "softmax": "exp(x - max) / sum, the division correctly rounded",
    "TRITON_MAX_TENSOR_NUMEL": "Triton's constant (1048576); tilefuse's verifier has its own tile limits",
    "sqrt": "correctly rounded on both backends (Triton's is approximate on the GPU)",
    "fdiv": "correctly rounded on both backends (Triton's default is approximate)",
    "math": "Triton's tl.math names, plus the libdevice functions of tl.extra.cuda.libdevice",
    "extra": "tl.extra.cuda.libdevice (and tl.extra.libdevice): the libdevice math functions",
    "assume": "accepted and checked to be boolean; not used by the optimizer yet",
    "float8e4nv": "f8e4m3 (OCP)",
    "float8e4b15": "f8e4b15, Triton's: f16's bits without the top exponent bit (no inf or NaN, largest 1.875); "
    "casts to it round to f16 in the cast's mode, clamp to 1.75 and round half away, as Triton's PTX does",
    "float8e5": "f8e5m2 (OCP)",
    "associative_scan": "sequential along the axis; the GPU splits long lines into runs (same result for an "
    "associative combine_fn, within rounding for floats)",
    "sort": "Triton's bitonic network, along the last dimension (as Triton)",
}

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "language.md"


def render() -> str:
    sys.path.insert(0, str(ROOT / "frontend"))
    import tilefuse.language as tl

    rows = []
    for name in sorted(TRITON_NAMES, key=str.lower):
        has = hasattr(tl, name)
        if has and name in MISSING:
            raise SystemExit(f"tl.{name} exists now: remove it from MISSING in {__file__}")
        if not has and name not in MISSING:
            raise SystemExit(f"tl.{name} is missing: say why in MISSING in {__file__}")
        rows.append(f"| `{name}` | {'yes' if has else 'no'} | {NOTES.get(name, '') if has else MISSING[name]} |")
    n = sum(hasattr(tl, name) for name in TRITON_NAMES)
    head = [
        "# triton.language in tilefuse",
        "",
        "Every name of Triton's `triton.language` (its `__all__`) and whether `tilefuse.language`",
        f"has it: {n} of {len(TRITON_NAMES)}. Generated by `scripts/language_table.py`, which imports",
        "`tilefuse.language`; `tests/python/test_language_table.py` fails when this file is stale.",
        "",
        "| name | tilefuse | note |",
        "|---|---|---|",
    ]
    lib = sorted(n for n in dir(tl.extra.cuda.libdevice) if not n.startswith("_"))
    tail = [
        "",
        "## tl.extra.cuda.libdevice",
        "",
        "The libdevice functions tilefuse has (each is the `tl.math` function of that name; on",
        "the GPU libdevice or an exact instruction, on the interpreter libm in float64 rounded once; ulp bounds in",
        "`tests/math_cases.py`); other libdevice names are not there yet:",
        "",
        ", ".join(f"`{n}`" for n in lib),
        "",
        "## Triton's test_core.py cases tilefuse does not pass (out of scope)",
        "",
        "`scripts/conformance/run_test_core.py` runs Triton 3.4's own language tests against tilefuse",
        '(`bench/RESULTS.md`, "conformance"). The cases left, and why:',
        "",
        "- `test_load_scope_sem_coop_grid_cta_one` (device cpu): `launch_cooperative_grid=True` is a cooperative",
        "  launch (every program resident at once, for grid-wide barriers). The GPU launches it so (the driver's",
        "  cooperative launch, a LaunchError when the grid cannot all be resident); the interpreter runs programs",
        "  one after another, so it refuses the keyword for more than one program rather than ignore a guarantee",
        "  it does not give (a grid-wide barrier would wait forever).",
        "- `test_tma_load_block_shape_err`, `test_tma_store_block_shape_err`: Triton refuses descriptor blocks",
        "  whose rows are under 16 bytes; tilefuse accepts them:",
        "  a descriptor whose block TMA cannot take runs as pointer code (plan-tma says why).",
        "- `test_zero_strided_tensors` (device cpu): the test itself calls `torch.cuda.device(...)`, which torch",
        "  refuses without a GPU; it runs with `--device cuda`.",
        "",
        "On the GPU (`--device cuda`) the cases left beyond these check Triton's own compiler output, not results:",
        "",
        "- `test_optimize_thread_locality`, `test_assume`: read Triton's `ttgir` text, which tilefuse does not",
        "  have (its GPU IR is `TILEFUSE_DUMP=gpu`).",
        "- `test_dot` with int8 on mma.sync (num_warps=2, or M=32): the test looks for `.satfinite` in",
        "  `mma.sync.aligned.m16n8k32`; tilefuse's int8 dots wrap on int32 overflow on every backend (as its",
        "  interpreter and wgmma do), Triton's mma.sync saturates.",
        "- `test_vectorization`, `test_vectorization_hints`, `test_permute`: look for `ld.global.v4.b32` /",
        "  `st.global.v4.b32` (Triton's inline assembly); LLVM prints tilefuse's 16-byte accesses with their",
        "  element type (`ld.global.v4.u32`, `.f32`), the same instruction.",
        "- `test_tl_range_num_stages`: looks for `cp.async.wait_group 6` (Triton commits the copies of A and",
        "  B as two groups per stage); tilefuse commits one group per stage and waits for `stages - 2`.",
        "- `num_ctas` > 1 (thread-block clusters): refused with an error, not implemented.",
    ]
    return "\n".join(head + rows + tail) + "\n"


def main(argv) -> int:
    text = render()
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is stale: run python scripts/language_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
