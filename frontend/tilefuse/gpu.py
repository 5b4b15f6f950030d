"""The CUDA backend: tile IR -> PTX (C++ lowering) -> cubin (ptxas, cached on
disk) -> launch through the C++ runtime on the current torch stream."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from . import _C, defaults
from .arrays import DLPackArg, is_dlpack
from .errors import CompilationError, LaunchError, render

_D = _C.ir.DType
_R = _C.runtime
_compiler_id = None
# TILEFUSE_TARGET=sm_80 (or sm_89, ...) compiles launches for that arch instead of the
# GPU's, and lets the driver JIT the PTX: the older GPUs' code paths run on a newer GPU.
_TARGET = os.environ.get("TILEFUSE_TARGET") or None


def _compiler_fingerprint() -> str:
    """A hash of the compiler library, so that a rebuilt compiler never reuses cubins
    that an older one produced."""
    global _compiler_id
    if _compiler_id is None:
        lib = os.path.join(os.path.dirname(__file__), "libtilefuse_compiler.so")
        if not os.path.exists(lib):  # a build that links the compiler into the extension
            lib = _C.__file__
        h = hashlib.blake2b(digest_size=16)
        with open(lib, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _compiler_id = h.hexdigest()
    return _compiler_id


def arch_of_device(device: int) -> str:
    """The target a launch on `device` compiles for (TILEFUSE_TARGET when set)."""
    if _TARGET is not None:
        return _TARGET
    info = _R.device_info(device)
    cc = info.major * 10 + info.minor
    if cc >= 90:
        return "sm_90a" if cc == 90 else "sm_90"
    if cc >= 89:
        return "sm_89"
    if cc >= 80:
        return "sm_80"
    raise LaunchError(f"{info.name} (sm_{cc}) is older than sm_80, which tilefuse needs")


def default_target() -> str:
    """What warmup compiles for without target=: TILEFUSE_TARGET, else GPU 0's arch, else sm_90a."""
    if _TARGET is not None:
        return _TARGET
    return arch_of_device(0) if _R.device_count() > 0 else "sm_90a"


def lower(kernel, arch: str, num_warps: int, num_stages: int, keep_ir: bool = True) -> dict:
    """PTX (and, with keep_ir, the optimized LLVM IR) for a compiled kernel (no GPU needed).
    Under TILEFUSE_DUMP (gpu, plan_layouts or all) the GPU stage of a copy prints first."""
    try:
        if os.environ.get("TILEFUSE_DUMP"):
            _C.passes.gpu_stage(kernel.module, arch, num_warps)
        low = _C.lower.compile(kernel.module, kernel.name, arch, num_warps, num_stages, keep_ir)
    except _C.UserError as e:
        raise CompilationError(e.message, e.file, e.line, e.col) from None
    hints = low.hints
    if perf_hints():
        for file, line, col, message in hints:
            print(render(f"{message} [{kernel.name}, {arch}]", file, line, col, kind="perf"), file=sys.stderr)
    return {
        "llir": low.llir,
        "ptx": low.ptx,
        "num_threads": low.num_threads,
        "shared_bytes": low.shared_bytes,
        "tensor_maps": low.tensor_maps,
        "hints": hints,
    }


def perf_hints() -> bool:
    """TILEFUSE_PERF_HINTS=1: every compile for the GPU prints the fast paths it missed
    (to stderr, at the kernel's lines), and launches bypass the disk cache so they do."""
    return os.environ.get("TILEFUSE_PERF_HINTS") == "1"


def _cache_key(kernel, arch: str, num_warps: int, num_stages: int) -> str:
    parts = [defaults.__version__, _compiler_fingerprint(), arch, str(num_warps), str(num_stages), kernel.asm["tile"]]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def ptxas_path() -> str | None:
    exe = shutil.which("ptxas") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")
    return exe if os.path.exists(exe) else None


def _ptxas(ptx: str, arch: str) -> bytes | None:
    exe = ptxas_path()
    if exe is None:
        return None  # the driver JIT-compiles the PTX instead
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([exe, f"-arch={arch}", src, "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompilationError(f"ptxas rejected the generated PTX for {arch}:\n{r.stderr}")
        with open(out, "rb") as f:
            return f.read()


def binary(kernel, arch: str, num_warps: int, num_stages: int) -> tuple[bytes, dict]:
    """The loadable image (cubin, or PTX when ptxas is absent) and launch metadata,
    from the disk cache when present. A corrupted entry reads as missing."""
    cache = _R.DiskCache()
    key = _cache_key(kernel, arch, num_warps, num_stages)
    blob = None if perf_hints() else cache.get(key)
    if blob is not None:
        threads, shared, n, m = struct.unpack_from("<iiII", blob)
        meta = {"num_threads": threads, "shared_bytes": shared, "tensor_maps": json.loads(blob[16 + n : 16 + n + m])}
        return blob[16 + n + m :], dict(meta, ptx=blob[16 : 16 + n].decode())
    low = lower(kernel, arch, num_warps, num_stages, keep_ir=False)  # a launch needs no LLVM IR text
    # A forced target's cubin may not run on this GPU; its PTX does, through the driver JIT.
    image = (None if _TARGET else _ptxas(low["ptx"], arch)) or (low["ptx"].encode() + b"\0")
    ptx = low["ptx"].encode()
    maps = json.dumps(low["tensor_maps"]).encode()
    head = struct.pack("<iiII", low["num_threads"], low["shared_bytes"], len(ptx), len(maps))
    cache.put(key, head + ptx + maps + image)
    return image, low


def _pack(name, t, v, device):
    """A runtime.KernelArg for parameter `name` of type `t`, and its raw value (the
    data pointer of a tensor)."""
    K = _R.ArgKind
    if t.is_ptr:
        if hasattr(v, "data_ptr"):
            if v.device.type != "cuda":
                raise LaunchError(f"argument '{name}' is on {v.device}; the CUDA backend needs GPU tensors")
            if v.device.index != device:
                raise LaunchError(f"argument '{name}' is on cuda:{v.device.index} but the kernel runs on cuda:{device}")
            ptr = v.data_ptr()
            elem = v.element_size()
        elif is_dlpack(v):
            info = DLPackArg(name, v)
            if not info.on_gpu or info.device != device:
                raise LaunchError(f"argument '{name}' is not memory of cuda:{device}")
            ptr, elem = info.ptr, max(1, _C.ir.bit_width(info.dtype) // 8)
        else:
            cai = v.__cuda_array_interface__
            ptr = cai["data"][0]
            elem = int(cai["typestr"][2:])
            owner = _R.pointer_device(ptr)
            if owner != device:
                raise LaunchError(f"argument '{name}' is not memory of cuda:{device}")
        if ptr % elem:
            raise LaunchError(f"argument '{name}' is misaligned: address {ptr:#x} is not a multiple of {elem} bytes")
        return _R.KernelArg(K.ptr, ptr), ptr
    if t.elem == _D.f32:
        return _R.KernelArg(K.f32, struct.unpack("<I", struct.pack("<f", float(v)))[0]), v
    if t.elem == _D.i1:
        return _R.KernelArg(K.i1, int(bool(v))), v
    if t.elem == _D.i64:
        return _R.KernelArg(K.i64, int(v) & (2**64 - 1)), v
    return _R.KernelArg(K.i32, int(v) & (2**32 - 1)), v


def device_of(values) -> int:
    """The GPU that holds the first device argument (torch or DLPack); 0 otherwise."""
    for v in values:
        if hasattr(v, "data_ptr") and getattr(getattr(v, "device", None), "type", None) == "cuda":
            return v.device.index
        if is_dlpack(v):
            info = DLPackArg("?", v)
            if info.on_gpu:
                return info.device
    return 0


def _current_stream(device: int) -> int:
    """The current torch stream of `device` (0, the default stream, without torch)."""
    global _torch
    if _torch is None:
        try:
            import torch

            _torch = torch if torch.cuda.is_available() else False
        except ImportError:
            _torch = False
    if not _torch:
        return 0
    raw = getattr(_torch._C, "_cuda_getCurrentRawStream", None)  # skips building a Stream object
    return raw(device) if raw is not None else _torch.cuda.current_stream(device).cuda_stream


_torch = None


_STRUCT = {_D.i32: "i", _D.i64: "q", _D.f32: "f"}


def pack_plan(spec, names):
    """[(parameter index, struct code)] of the kernel's runtime parameters in order, for the
    C++ launch fast path; None when one has no plain C layout (i1)."""
    plan = []
    for s in spec:
        if s[1] != "arg":
            continue
        t = s[2]
        code = "Q" if t.is_ptr else _STRUCT.get(t.elem)
        if code is None:
            return None
        plan.append((names.index(s[0]), code))
    return plan


def map_plan(maps, plan):
    """The tensor maps of a kernel for the C++ launch fast path: their kernel-parameter
    indices turned into call-parameter indices through `plan` (pack_plan's)."""

    def dim(d):
        return (plan[d[0]][0] if d[0] >= 0 else -1, d[1])

    return [
        (
            m["elem_bytes"],
            plan[m["base"]][0],
            [dim(d) for d in m["sizes"]],
            [dim(d) for d in m["strides"]],
            m["box"],
            m["swizzle"],
            m["where"],
        )
        for m in maps
    ]


def stream_function():
    """device -> the current torch stream (raw handle); None (the default stream) without torch."""
    _current_stream(0)  # imports torch once, if it is there
    if not _torch:
        return None
    return getattr(_torch._C, "_cuda_getCurrentRawStream", None) or _current_stream


def _encode_maps(maps, raw, name):
    """The tensor maps of one launch from the raw argument values."""

    def value(d):  # (parameter or -1, constant)
        return d[1] if d[0] < 0 else int(raw[d[0]])

    out = []
    for m in maps:
        try:
            out.append(
                _R.encode_tensor_map(
                    m["elem_bytes"],
                    raw[m["base"]],
                    [value(d) for d in m["sizes"]],
                    [value(d) for d in m["strides"]],
                    m["box"],
                    m["swizzle"],
                    m["where"],
                )
            )
        except _R.TensorMapError as e:
            raise LaunchError(f"{name}: {e}") from None
    return out


def launch(kernel, spec, bound, grid, num_warps: int, num_stages: int):
    """Launches on the GPU of the arguments; returns the loaded kernel and its tensor maps."""
    device = device_of(bound.values())
    _R.use_device(device)
    entry = kernel.loaded.get((device, num_warps, num_stages))
    if entry is None:
        image, meta = binary(kernel, arch_of_device(device), num_warps, num_stages)
        kernel.asm.setdefault("ptx", meta["ptx"])
        info = _R.device_info(device)
        if meta["shared_bytes"] > info.max_shared_per_block_optin:
            raise LaunchError(
                f"{kernel.name}: needs {meta['shared_bytes']} bytes of shared memory with num_warps={num_warps}, "
                f"num_stages={num_stages}; {info.name} allows {info.max_shared_per_block_optin} per block "
                "(use fewer stages or smaller tiles)"
            )
        loaded = _R.LoadedKernel(device, image, kernel.name, meta["num_threads"], meta["shared_bytes"])
        entry = kernel.loaded[(device, num_warps, num_stages)] = (loaded, meta["tensor_maps"])
    loaded, maps = entry
    packed = [_pack(s[0], s[2], bound[s[0]], device) for s in spec if s[1] == "arg"]
    args = [p[0] for p in packed]
    encoded = _encode_maps(maps, [p[1] for p in packed], kernel.name) if maps else []
    loaded.launch(grid, _current_stream(device), args, encoded)
    return loaded, maps
