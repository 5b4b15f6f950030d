"""Ahead-of-time compilation for C and C++ programs (as Triton's compile.py):

    python -m tilefuse.aot kernel.py:axpy --signature "*fp32:16, *fp32:16, *fp32:16, fp32, i32, 1024" \\
        --grid "cdiv(n, BLOCK)" -o out/

writes out/axpy.h (a C header), out/axpy.cpp (its launch function), out/axpy.ptx and, when ptxas is
found, out/axpy.cubin, which axpy.cpp embeds (without ptxas it embeds the PTX, which the driver
compiles at the first launch). The launch function is typed by the signature:

    CUresult axpy(CUstream stream, CUdeviceptr x_ptr, CUdeviceptr y_ptr, CUdeviceptr out_ptr, float a, int32_t n);
    const char* axpy_error(void);  // the message of this thread's last failed call

and needs only the runtime library (runtime/: `--print-include-dir`, `--print-runtime-library`; no
Python, no LLVM); it loads the kernel into the context current at its first launch on each device
(the device's primary context when none is current) and returns the failing driver call's CUresult,
or CUDA_ERROR_INVALID_VALUE for arguments the signature rules out.

Signature: one item per kernel parameter, in order, separated by commas; trailing parameters with
defaults may be left out (their defaults are compiled in).
    *T      a pointer to T elements          *T:16   ... whose address is a multiple of 16 bytes
    T       a scalar parameter (i1 ... u64, fp32, fp64)
    T:16    an integer whose value is a multiple of 16
    value   compiled in: 1024, 0.5, True, tl.bfloat16 (constexpr parameters take one)
T is Triton's name (fp16 bf16 fp32 fp64 fp8e4nv fp8e5 i1 i8 i16 i32 i64 u8 u16 u32 u64) or the
tile IR's (f16 f32 f8e4m3 f8e5m2 ...). The :16 hints are what the JIT specializes on (16-byte
vector accesses, TMA); the launch function checks them and refuses arguments that break them.

Grid: one to three comma-separated integer expressions (missing ones are 1) of the integer
parameters and the compiled-in values, with + - * // % (Python's floor semantics), unary -,
parentheses and cdiv(a, b).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
from dataclasses import dataclass

import numpy as np

from . import _C, gpu
from .defaults import NUM_STAGES, NUM_WARPS
from .errors import CompilationError
from .jit import GRID_LIMITS, JITFunction, Param
from .language import core as tl

_D = _C.ir.DType
_S = _C.specialize
_PKG = os.path.dirname(os.path.abspath(__file__))

_TRITON_NAMES = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64", "fp8e4nv": "f8e4m3", "fp8e5": "f8e5m2"}
_SCALARS = {  # the numpy scalar type whose argument spec a scalar item takes
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "f32": np.float32,
    "f64": np.float64,
}
# The C type of each runtime.ParamKind, and how the launch passes it (an int64 slot).
_C_TYPES = {
    "ptr": "CUdeviceptr",
    "i1": "bool",
    "i8": "int8_t",
    "i16": "int16_t",
    "i32": "int32_t",
    "i64": "int64_t",
    "u8": "uint8_t",
    "u16": "uint16_t",
    "u32": "uint32_t",
    "u64": "uint64_t",
    "f32": "float",
    "f64": "double",
}
# Names the generated C++ cannot take for parameters or the function: its own and C++'s.
_RESERVED = set(
    "stream fail loaded currentDevice floordiv floormod cdiv kImage kSpec lastError rt "
    "alignas alignof and asm auto bool break case catch char class const constexpr continue default delete do "
    "double else enum explicit export extern false float for friend goto if inline int long mutable namespace new "
    "noexcept not nullptr operator or private protected public register return short signed sizeof static struct "
    "switch template this throw true try typedef typename union unsigned using virtual void volatile while".split()
)
_SLOTS = {"ptr": "static_cast<int64_t>({})", "i1": "{} ? 1 : 0", "f32": "rt::f32Arg({})", "f64": "rt::f64Arg({})"}


class AotError(ValueError):
    """A signature, grid or kernel reference that cannot be compiled, with the reason."""


@dataclass
class Item:
    """One parameter as the signature gives it: a jit Param and the text it came from."""

    param: Param
    text: str


def _dtype(name: str, item: str):
    ir = _TRITON_NAMES.get(name, name)
    if ir not in _D.__members__:
        raise AotError(f"signature item '{item}': unknown type '{name}'")
    return getattr(_D, ir)


def _literal(text: str):
    if text.startswith("tl."):
        v = getattr(tl, text[3:], None)
        if not isinstance(v, tl.dtype):
            raise AotError(f"signature item '{text}': tl has no dtype '{text[3:]}'")
        return v
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return v if isinstance(v, (bool, int, float)) else None


def _item(kernel: JITFunction, name: str, text: str) -> Item:
    value = _literal(text)
    if value is not None:
        return Item(Param(name, value=value), text)
    if name in kernel.constexprs:
        raise AotError(f"signature item '{text}': '{name}' is a constexpr and takes a value (e.g. 1024, tl.float16)")
    body, _, hint = text.partition(":")
    if hint not in ("", "16"):
        raise AotError(f"signature item '{text}': the only hint is ':16'")
    if body.startswith("*"):
        d = _dtype(body[1:].strip(), text)  # the spec of an address that is (16) or is not (8) 16-byte aligned
        return Item(Param(name, spec=_S.pointer(d, 16 if hint else 8)), text)
    ir = _TRITON_NAMES.get(body, body)
    if ir not in _SCALARS:
        raise AotError(f"signature item '{text}': unknown type '{body}' (scalars: {', '.join(_SCALARS)})")
    if hint and ir in ("f32", "f64", "i1"):
        raise AotError(f"signature item '{text}': ':16' applies to integers only")
    sample = _SCALARS[ir](16 if hint else (True if ir == "i1" else 3))  # a value of the spec the JIT would give
    return Item(Param(name, spec=_S.scalar(sample, True)), text)


def parse_signature(kernel: JITFunction, signature: str) -> list[Item]:
    """One Item per parameter of `kernel` (see the module docstring for the grammar)."""
    texts = [t.strip() for t in signature.split(",")] if signature.strip() else []
    params = kernel.params
    if len(texts) > len(params):
        raise AotError(f"signature has {len(texts)} items; {kernel.__name__} has {len(params)} parameters")
    items = [_item(kernel, p.name, t) for p, t in zip(params, texts)]
    for p in params[len(texts) :]:
        if p.default is p.empty:
            raise AotError(f"signature has no item for parameter '{p.name}' of {kernel.__name__} (it has no default)")
        items.append(Item(Param(p.name, value=tl._unwrap(p.default)), f"{p.name}={p.default!r}"))
    return items


class _Grid:
    """A grid expression as C++ over the launch function's parameters (int64 arithmetic)."""

    OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
    CALLS = {ast.FloorDiv: "floordiv", ast.Mod: "floormod"}

    def __init__(self, ints: set, constants: dict):
        self.ints, self.constants, self.helpers = ints, constants, set()

    def c(self, node) -> str:
        if isinstance(node, ast.BinOp) and type(node.op) in self.OPS:
            return f"({self.c(node.left)} {self.OPS[type(node.op)]} {self.c(node.right)})"
        if isinstance(node, ast.BinOp) and type(node.op) in self.CALLS:
            fn = self.CALLS[type(node.op)]
            self.helpers.update({fn, "floordiv"})
            return f"{fn}({self.c(node.left)}, {self.c(node.right)})"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            raise AotError("grid: '/' is ambiguous; write '//' (floor division) or cdiv(a, b)")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"(-{self.c(node.operand)})"
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return f"int64_t{{{node.value}}}"
        if isinstance(node, ast.Name):
            if node.id in self.ints:
                return f"static_cast<int64_t>({node.id})"
            v = self.constants.get(node.id)
            if type(v) is int:
                return f"int64_t{{{v}}}"
            raise AotError(f"grid: '{node.id}' is not an integer parameter or compiled-in integer of the kernel")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cdiv":
            if len(node.args) != 2 or node.keywords:
                raise AotError("grid: cdiv takes two arguments")
            self.helpers.update({"cdiv", "floordiv"})
            return f"cdiv({self.c(node.args[0])}, {self.c(node.args[1])})"
        raise AotError(f"grid: '{ast.unparse(node)}' is not +, -, *, //, %, cdiv, an integer or a parameter")


_HELPERS = {
    "floordiv": """int64_t floordiv(int64_t a, int64_t b) {
  if (b == 0) throw std::invalid_argument("the grid divides by zero");
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}""",
    "floormod": "int64_t floormod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }",
    "cdiv": "int64_t cdiv(int64_t a, int64_t b) { return floordiv(a + b - 1, b); }",
}


def grid_to_c(grid: str, ints: set, constants: dict) -> tuple[list[str], list[str]]:
    """The three C++ expressions of `grid` and the helper functions they call."""
    try:
        tree = ast.parse(grid.strip(), mode="eval").body
    except SyntaxError as e:
        raise AotError(f"grid '{grid}': {e.msg}") from None
    dims = tree.elts if isinstance(tree, ast.Tuple) else [tree]
    if not 1 <= len(dims) <= 3:
        raise AotError(f"grid '{grid}': 1 to 3 dimensions, got {len(dims)}")
    g = _Grid(ints, constants)
    exprs = [g.c(d) for d in dims] + ["int64_t{1}"] * (3 - len(dims))
    return exprs, [_HELPERS[h] for h in ("floordiv", "floormod", "cdiv") if h in g.helpers]


def load_kernel(ref: str) -> JITFunction:
    """The @jit kernel `name` of `path/file.py:name`."""
    path, sep, name = ref.rpartition(":")
    if not sep or not path or not name:
        raise AotError(f"kernel '{ref}': expected path/to/file.py:kernel_name")
    if not os.path.isfile(path):
        raise AotError(f"kernel '{ref}': no file {path}")
    mod_name = "_tilefuse_aot_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    kernel = getattr(module, name, None)
    if not isinstance(kernel, JITFunction):
        what = "nothing" if kernel is None else f"a {type(kernel).__name__}"
        raise AotError(f"kernel '{ref}': {name} in {path} is {what}, not a @tilefuse.jit kernel")
    return kernel


@dataclass
class Compiled:
    """What compile_kernel produced: the files to write, by name, and the image's kind."""

    files: dict
    image_kind: str  # "cubin" or "ptx"


def compile_kernel(
    kernel: JITFunction,
    signature: str,
    grid: str,
    name: str | None = None,
    target: str = "sm_90a",
    num_warps: int = NUM_WARPS,
    num_stages: int = NUM_STAGES,
    image: str = "auto",
) -> Compiled:
    """The header, launch source, PTX and (with ptxas, unless image="ptx") cubin of one
    specialization of `kernel`; needs no GPU. image: "auto", "cubin" (ptxas required) or "ptx"."""
    name = name or kernel.__name__
    if not name.isidentifier() or name in _RESERVED:
        raise AotError(f"'{name}' cannot name the C function (not an identifier, or reserved): pass --name")
    items = parse_signature(kernel, signature)
    clash = [i.param.name for i in items if i.param.spec is not None and i.param.name in _RESERVED]
    if clash:
        raise AotError(f"parameter '{clash[0]}' of {kernel.__name__} is reserved in the generated C++; rename it")
    compiled = kernel._compile([i.param for i in items])
    low = gpu.lower(compiled, target, num_warps, num_stages, keep_ir=False, debug=False)  # no hidden parameters
    spec, ptx = low["spec"], low["ptx"]
    cubin = None
    if image != "ptx":
        if image == "cubin" and gpu.ptxas_path() is None:
            raise AotError("--image cubin needs ptxas (on PATH or in $CUDA_HOME/bin)")
        cubin = (gpu._ptxas(ptx, target) or (None, None))[0]
    params = [(p.name, p.kind.name) for p in spec.params]
    ints = {n for n, k in params if k not in ("ptr", "f32", "f64")}
    constants = {i.param.name: i.param.value for i in items if i.param.spec is None}
    dims, helpers = grid_to_c(grid, ints, constants)
    hinted = {i.param.name: i.text for i in items if i.param.spec is not None and i.param.spec.divisible}
    about = dict(
        kernel=kernel.__name__,
        file=kernel.source.file,
        signature=", ".join(i.text for i in items),
        grid=grid,
        target=target,
        num_warps=num_warps,
        num_stages=num_stages,
        shared=spec.shared_bytes,
        image="cubin" if cubin else "PTX (compiled by the driver at the first launch)",
    )
    files = {
        f"{name}.h": _header(name, params, about),
        f"{name}.cpp": _source(name, params, hinted, dims, helpers, spec.to_json(), cubin or ptx.encode() + b"\0"),
        f"{name}.ptx": ptx,
    }
    if cubin:
        files[f"{name}.cubin"] = cubin
    return Compiled(files, "cubin" if cubin else "ptx")


def _c_params(params) -> str:
    return "".join(f", {_C_TYPES[k]} {n}" for n, k in params)


def _header(name: str, params, about: dict) -> str:
    return f"""// Generated by `python -m tilefuse.aot`: {about['kernel']} of {about['file']}.
// signature: {about['signature']}
// grid: {about['grid']}; {about['target']}, num_warps={about['num_warps']}, num_stages={about['num_stages']}, \
{about['shared']} bytes of shared memory; image: {about['image']}
#pragma once

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

// Launches on `stream` in the current context (loading the kernel there at its first launch);
// returns the failed driver call's result, or CUDA_ERROR_INVALID_VALUE for arguments the
// signature rules out. Thread-safe.
CUresult {name}(CUstream stream{_c_params(params)});
// The message of this thread's last failed call of {name} ("" after a success).
const char* {name}_error(void);

#ifdef __cplusplus
}}
#endif
"""


def _bytes_literal(data: bytes) -> str:
    rows = [", ".join(f"0x{b:02x}" for b in data[i : i + 16]) for i in range(0, len(data), 16)]
    return ",\n".join("    " + r for r in rows)


def _source(name, params, hinted, dims, helpers, spec_json, image) -> str:
    checks = "".join(
        f"""  if ({n} % 16 != 0)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "{name}: {n} is not a multiple of 16, as its signature item '{text}' requires");
"""
        for n, text in hinted.items()
    )
    slots = ", ".join(_SLOTS.get(k, "static_cast<int64_t>({})").format(n) for n, k in params)
    helper_text = "\n".join(helpers) + "\n\n" if helpers else ""
    return f"""// Generated by `python -m tilefuse.aot`; see {name}.h.
#include "{name}.h"

#include <array>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tilefuse/runtime/Launch.h"

namespace {{

namespace rt = tilefuse::runtime;

const unsigned char kImage[] = {{
{_bytes_literal(image)}}};

const char kSpec[] = R"tilefuse_spec({spec_json})tilefuse_spec";

thread_local std::string lastError;

CUresult fail(CUresult r, std::string message) {{
  lastError = std::move(message);
  return r;
}}

{helper_text}// The device of the current context; 0 when none is current (LoadedKernel then makes its
// primary context current, as the CUDA runtime does).
int currentDevice() {{
  const rt::DriverApi& d = rt::driver();
  CUcontext ctx = nullptr;
  TF_CU_CHECK(d.cuCtxGetCurrent(&ctx));
  if (!ctx) return 0;
  CUdevice dev;
  TF_CU_CHECK(d.cuCtxGetDevice(&dev));
  return static_cast<int>(dev);
}}

// The kernel of each device, loaded at its first launch there.
const rt::LoadedKernel& loaded(int device) {{
  static std::mutex mutex;
  static std::vector<std::unique_ptr<rt::LoadedKernel>> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  if (kernels.size() <= static_cast<size_t>(device)) kernels.resize(device + 1);
  if (!kernels[device]) {{
    std::string image(reinterpret_cast<const char*>(kImage), sizeof kImage);
    kernels[device] = std::make_unique<rt::LoadedKernel>(device, image, rt::launchSpecFromJson(kSpec));
  }}
  return *kernels[device];
}}

}}  // namespace

extern "C" CUresult {name}(CUstream stream{_c_params(params)}) {{
{checks}  try {{
    std::array<int64_t, 3> grid_ = {{{", ".join(dims)}}};
    const std::array<int64_t, 3> limit_ = {{{", ".join(str(x) for x in GRID_LIMITS)}}};  // jit.GRID_LIMITS (CUDA's)
    for (int a_ = 0; a_ < 3; ++a_)
      if (grid_[a_] < 0 || grid_[a_] > limit_[a_])
        return fail(CUDA_ERROR_INVALID_VALUE, "{name}: grid dimension " + std::to_string(a_) + " is " +
                                                  std::to_string(grid_[a_]) + "; it must be in [0, " +
                                                  std::to_string(limit_[a_]) + "] (CUDA's limit)");
    std::array<int64_t, {len(params)}> args_ = {{{slots}}};
    std::array<uint32_t, 3> g32_ = {{uint32_t(grid_[0]), uint32_t(grid_[1]), uint32_t(grid_[2])}};
    loaded(currentDevice()).launch(g32_, reinterpret_cast<uint64_t>(stream), args_.data());
  }} catch (const rt::DriverError& e_) {{
    return fail(e_.code(), e_.what());
  }} catch (const std::exception& e_) {{
    return fail(CUDA_ERROR_INVALID_VALUE, std::string("{name}: ") + e_.what());
  }}
  lastError.clear();
  return CUDA_SUCCESS;
}}

extern "C" const char* {name}_error(void) {{ return lastError.c_str(); }}
"""


def include_dir() -> str:
    """The runtime's headers: in the wheel beside the package, else in the source tree."""
    shipped = os.path.join(_PKG, "include")
    return shipped if os.path.isdir(shipped) else os.path.join(_PKG, "..", "..", "runtime", "include")


def runtime_library() -> str:
    """libtilefuse_runtime.a: in the wheel beside the package, else in the source tree's build/."""
    shipped = os.path.join(_PKG, "lib", "libtilefuse_runtime.a")
    if os.path.exists(shipped):
        return shipped
    return os.path.normpath(os.path.join(_PKG, "..", "..", "build", "runtime", "libtilefuse_runtime.a"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tilefuse.aot",
        description="Compile a @tilefuse.jit kernel ahead of time into a cubin and a C launch function.",
        epilog="The signature and grid grammars: python -c 'import tilefuse.aot; help(tilefuse.aot)'",
    )
    ap.add_argument("kernel", nargs="?", help="path/to/file.py:kernel_name")
    ap.add_argument("--signature", "-s", help='e.g. "*fp32:16, *fp32:16, i32, 1024"')
    ap.add_argument("--grid", "-g", help='e.g. "cdiv(n, BLOCK), 1, 1"')
    ap.add_argument("--out-dir", "-o", default=".", help="where the files go (default: .)")
    ap.add_argument("--name", "-n", help="the C function's name (default: the kernel's)")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--num-warps", "-w", type=int, default=NUM_WARPS)
    ap.add_argument("--num-stages", "-ns", type=int, default=NUM_STAGES)
    ap.add_argument("--image", choices=["auto", "cubin", "ptx"], default="auto", help="auto: cubin when ptxas is found")
    ap.add_argument("--print-include-dir", action="store_true", help="print the runtime's include folder and exit")
    ap.add_argument("--print-runtime-library", action="store_true", help="print libtilefuse_runtime.a's path and exit")
    a = ap.parse_args(argv)
    if a.print_include_dir or a.print_runtime_library:
        print(os.path.normpath(include_dir() if a.print_include_dir else runtime_library()))
        return 0
    if not a.kernel or a.signature is None or a.grid is None:
        ap.error("a kernel, --signature and --grid are required")
    try:
        kernel = load_kernel(a.kernel)
        out = compile_kernel(kernel, a.signature, a.grid, a.name, a.target, a.num_warps, a.num_stages, a.image)
    except (AotError, CompilationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.makedirs(a.out_dir, exist_ok=True)
    for file, data in out.files.items():
        with open(os.path.join(a.out_dir, file), "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
    print(f"wrote {', '.join(out.files)} to {a.out_dir}")
    if out.image_kind == "ptx" and a.image == "auto":
        print("no ptxas found: the launch function embeds the PTX, which the driver compiles at its first launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
