"""The CUDA backend: tile IR -> PTX (C++ lowering) -> cubin (ptxas, cached on
disk) -> launch through the C++ runtime on the current torch stream."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings

import numpy as np

try:  # numpy >= 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:
    _byte_bounds = np.byte_bounds

from . import _C, defaults
from .arrays import DLPackArg, is_dlpack
from .errors import CompilationError, KernelRuntimeError, LaunchError, bare, render

_R = _C.runtime
_compiler_id = None
# TILEFUSE_TARGET=sm_80 (or sm_89, ...) compiles launches for that arch instead of the
# GPU's, and lets the driver JIT the PTX: the older GPUs' code paths run on a newer GPU.
_TARGET = os.environ.get("TILEFUSE_TARGET") or None


def _compiler_fingerprint() -> str:
    """An id of the compiler library, so that a rebuilt compiler never reuses cubins that an
    older one produced: the linker's build ID (a hash of the library it wrote), else a hash of
    the file (tens of milliseconds for its 20-40 MB, at every process's first launch)."""
    global _compiler_id
    if _compiler_id is None:
        lib = os.path.join(os.path.dirname(__file__), "libtilefuse_compiler.so")
        if not os.path.exists(lib):  # a build that links the compiler into the extension
            lib = _C.__file__
        _compiler_id = build_id(lib)
        if _compiler_id is None:
            h = hashlib.blake2b(digest_size=16)
            with open(lib, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            _compiler_id = h.hexdigest()
    return _compiler_id


def build_id(path: str) -> str | None:
    """The GNU build ID (hex) of a 64-bit little-endian ELF file, from its PT_NOTE segments;
    None for other files and files without one."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:6] != b"\x7fELF\x02\x01":
            return None
        (phoff,) = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum):
            kind, _, offset, _, _, size, _, align = struct.unpack_from("<IIQQQQQQ", table, i * phentsize)
            if kind != 4:  # PT_NOTE
                continue
            f.seek(offset)
            notes = f.read(size)
            pad = (lambda n: (n + 7) & ~7) if align == 8 else (lambda n: (n + 3) & ~3)
            pos = 0
            while pos + 12 <= len(notes):
                namesz, descsz, note = struct.unpack_from("<III", notes, pos)
                desc = pos + 12 + pad(namesz)
                if note == 3 and notes[pos + 12 : pos + 12 + namesz] == b"GNU\0":  # NT_GNU_BUILD_ID
                    return notes[desc : desc + descsz].hex()
                pos = desc + pad(descsz)
    return None


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


def lower(kernel, arch: str, num_warps: int, num_stages: int, keep_ir: bool = True, debug: bool | None = None) -> dict:
    """For a compiled kernel (no GPU needed): "ptx", "gpu" and "llir" (the GPU-stage IR the
    lowering read and the optimized LLVM IR, with keep_ir), "hints" (the fast paths missed),
    "spec" (its runtime.LaunchSpec) and "checks" (a debug build's bounds-checked accesses:
    file, line, col, what, parameter, element bytes, shape). `debug` defaults to
    TILEFUSE_DEBUG=1. Under TILEFUSE_DUMP (gpu, plan_layouts or all) the GPU stage the
    lowering reads prints first."""
    debug = debug_mode() if debug is None else debug
    try:
        low = _C.lower.compile(kernel.module, kernel.name, arch, num_warps, num_stages, keep_ir, debug=debug)
    except _C.UserError as e:
        raise CompilationError(e.message, e.file, e.line, e.col) from bare(e)
    hints = low.hints
    if perf_hints():
        for file, line, col, message in hints:
            print(render(f"{message} [{kernel.name}, {arch}]", file, line, col, kind="perf"), file=sys.stderr)
    out = {"gpu": low.gpu_ir, "llir": low.llir, "ptx": low.ptx, "hints": hints, "spec": low.spec}
    out["checks"] = [list(c[:6]) + [list(c[6])] for c in low.checks]
    return out


def debug_mode() -> bool:
    """TILEFUSE_DEBUG=1: GPU builds bounds-check every load, store and atomic against its
    buffer, and a launch raises KernelRuntimeError at the first violation (README: debug mode)."""
    return os.environ.get("TILEFUSE_DEBUG") == "1"


def perf_hints() -> bool:
    """TILEFUSE_PERF_HINTS=1: every compile for the GPU prints the fast paths it missed
    (to stderr, at the kernel's lines), and launches bypass the disk cache so they do."""
    return os.environ.get("TILEFUSE_PERF_HINTS") == "1"


def _cache_key(kernel, arch: str, num_warps: int, num_stages: int, debug: bool = False) -> str:
    parts = [defaults.__version__, _compiler_fingerprint(), arch, str(num_warps), str(num_stages), str(debug)]
    parts.append(kernel.asm["tile"])
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def ptxas_path() -> str | None:
    exe = shutil.which("ptxas") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")
    return exe if os.path.exists(exe) else None


def _ptxas(ptx: str, arch: str) -> tuple[bytes, dict] | None:
    """The cubin and what ptxas -v reports of it: "registers" per thread, "smem" (static
    shared bytes), "spill_stores" and "spill_loads" (bytes)."""
    exe = ptxas_path()
    if exe is None:
        return None  # the driver JIT-compiles the PTX instead
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([exe, "-v", f"-arch={arch}", src, "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompilationError(f"ptxas rejected the generated PTX for {arch}:\n{r.stderr}")
        with open(out, "rb") as f:
            return f.read(), ptxas_usage(r.stderr + r.stdout)


def ptxas_usage(report: str) -> dict:
    """The resource lines of `ptxas -v` (one kernel per module)."""

    def num(pattern):
        m = re.search(pattern, report)
        return int(m.group(1)) if m else 0

    return {
        "registers": num(r"Used (\d+) registers"),
        "smem": num(r"(\d+) bytes smem"),
        "spill_stores": num(r"(\d+) bytes spill stores"),
        "spill_loads": num(r"(\d+) bytes spill loads"),
    }


# The most shared memory per block of any GPU each target runs on (opt-in): H100/H200,
# A100 (sm_80 code also runs on sm_86/87, which have less: load() checks the device).
ARCH_SHARED_LIMIT = {"sm_90a": 232448, "sm_90": 232448, "sm_89": 101376, "sm_80": 166912}


def check_resources(kernel, spec, usage: dict | None, arch: str, num_warps: int, num_stages: int) -> list:
    """LaunchError for a build no GPU of `arch` can launch (its shared memory); the perf
    hints of ptxas's report (register spills), as lower's "hints" lists."""
    shared = spec.shared_bytes + (usage or {}).get("smem", 0)
    limit = ARCH_SHARED_LIMIT.get(arch)
    if limit is not None and shared > limit:
        raise LaunchError(
            f"{kernel.name}: needs {shared} bytes of shared memory with num_warps={num_warps}, "
            f"num_stages={num_stages}; {arch} allows {limit} per block (use fewer stages or smaller tiles)"
        )
    if not usage or not (usage["spill_stores"] or usage["spill_loads"]):
        return []
    f = kernel.module.lookup_func(kernel.name)
    loc = f.loc if f is not None else None
    return [
        [
            loc.file if loc else None,
            loc.line if loc else 0,
            loc.col if loc else 0,
            f"register spills: {usage['spill_stores']} bytes of spill stores and {usage['spill_loads']} of spill "
            f"loads per thread at {usage['registers']} registers, the most {num_warps * 32} threads "
            f"(num_warps={num_warps}) may use (fewer warps or smaller tiles keep values in registers)",
        ]
    ]


def binary(kernel, arch: str, num_warps: int, num_stages: int):
    """The runtime.CachedKernel (launch spec, PTX, loadable image: a cubin, or PTX when ptxas
    is absent): prebuilt (tilefuse.prebuilt), else from the disk cache, compiled and stored
    when missing or corrupted."""
    find = getattr(kernel, "prebuilt", None)
    entry = None if find is None else find(arch, num_warps, num_stages)
    return entry if entry is not None else build(kernel, arch, num_warps, num_stages)[0]


def build(kernel, arch: str, num_warps: int, num_stages: int):
    """binary's CachedKernel and the perf hints of its compile (as lower's "hints", lists);
    the hints are cached beside the kernel, so that a cached kernel still reports them.
    A debug build (TILEFUSE_DEBUG=1) keeps its checks in kernel.debug_checks too.
    Thread-safe: the C++ lowering runs without the GIL, so threads compile in parallel."""
    cache = _R.DiskCache()
    debug = debug_mode()
    key = _cache_key(kernel, arch, num_warps, num_stages, debug)
    entry = None if perf_hints() else cache.get_kernel(key)
    stored = None if entry is None else cache.get(key + "-hints")
    if entry is not None and stored is not None:
        try:
            info = json.loads(stored)
            if _is_build_info(info):
                if debug:
                    kernel.debug_checks[(arch, num_warps, num_stages)] = info["checks"]
                return entry, info["hints"]
        except ValueError:
            pass  # unreadable hints: compile again, which rewrites both
    low = lower(kernel, arch, num_warps, num_stages, keep_ir=False, debug=debug)  # a launch needs no LLVM IR text
    # A forced target's cubin may not run on this GPU; its PTX does, through the driver JIT.
    cubin, usage = (None if _TARGET else _ptxas(low["ptx"], arch)) or (None, None)
    image = cubin or (low["ptx"].encode() + b"\0")
    entry = _R.CachedKernel(low["spec"], low["ptx"], image)
    spills = check_resources(kernel, low["spec"], usage, arch, num_warps, num_stages)
    if perf_hints():
        for file, line, col, message in spills:
            print(render(f"{message} [{kernel.name}, {arch}]", file, line, col, kind="perf"), file=sys.stderr)
    hints = [list(h) for h in low["hints"]] + spills
    if debug:
        kernel.debug_checks[(arch, num_warps, num_stages)] = low["checks"]
    try:
        cache.put(key + "-hints", json.dumps({"hints": hints, "checks": low["checks"]}).encode())
        cache.put_kernel(key, entry)
    except (RuntimeError, OSError) as e:  # a cache dir that is a file, read-only, full, ...
        _warn_cache_once(cache.dir, e)
    return entry, hints


def _is_build_info(info) -> bool:
    """The cached "-hints" entry of a build: its perf hints and (debug builds) its checks."""
    return (
        isinstance(info, dict)
        and isinstance(info.get("hints"), list)
        and all(_is_hint(h) for h in info["hints"])
        and isinstance(info.get("checks"), list)
        and all(_is_check(c) for c in info["checks"])
    )


def _is_check(c) -> bool:
    """A debug build's checked access as lower() reports it (its "checks")."""
    return (
        isinstance(c, list)
        and len(c) == 7
        and (c[0] is None or isinstance(c[0], str))
        and all(type(x) is int for x in c[1:3] + c[4:6])
        and isinstance(c[3], str)
        and isinstance(c[6], list)
        and all(type(x) is int for x in c[6])
    )


def _is_hint(h) -> bool:
    """A cached perf hint as lower() reports it: [file or None, line, col, message]."""
    return (
        isinstance(h, list)
        and len(h) == 4
        and (h[0] is None or isinstance(h[0], str))
        and all(type(x) is int for x in h[1:3])
        and isinstance(h[3], str)
    )


_cache_warned = set()


def _warn_cache_once(where, error):
    if where not in _cache_warned:
        _cache_warned.add(where)
        warnings.warn(
            f"tilefuse: cannot write the kernel cache in {where} ({error}); compiling without it", stacklevel=3
        )


def _address(name, v, device) -> int:
    """The data pointer of array argument `name`, checked to be memory of `device` aligned to its elements."""
    if hasattr(v, "data_ptr"):
        if v.device.type != "cuda":
            raise LaunchError(f"argument '{name}' is on {v.device}; the CUDA backend needs GPU tensors")
        if v.device.index != device:
            raise LaunchError(f"argument '{name}' is on cuda:{v.device.index} but the kernel runs on cuda:{device}")
        ptr, elem = v.data_ptr(), v.element_size()
    elif is_dlpack(v):
        info = DLPackArg(name, v)
        if not info.on_gpu or info.device != device:
            raise LaunchError(f"argument '{name}' is not memory of cuda:{device}")
        ptr, elem = info.ptr, max(1, _C.ir.bit_width(info.dtype) // 8)
    else:
        cai = v.__cuda_array_interface__
        ptr, elem = cai["data"][0], int(cai["typestr"][2:])
        if _R.pointer_device(ptr) != device:
            raise LaunchError(f"argument '{name}' is not memory of cuda:{device}")
    if ptr % elem:
        raise LaunchError(f"argument '{name}' is misaligned: address {ptr:#x} is not a multiple of {elem} bytes")
    return ptr


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
torch_reads_why = "not tried"  # why the fast path calls torch's tensor methods, if it does


def _enable_torch_reads(torch):
    """Lets the launch fast path read torch.Tensor / Parameter without calling their methods
    (frontend/csrc/TorchReads.h), once probe tensors confirm the layout; TILEFUSE_TORCH_READS=0
    keeps the method calls."""
    global torch_reads_why
    if _C.launcher.torch_reads_enabled() or os.environ.get("TILEFUSE_TORCH_READS", "1") == "0":
        torch_reads_why = "" if _C.launcher.torch_reads_enabled() else "TILEFUSE_TORCH_READS=0"
        return
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    probes = [
        torch.empty(4, dtype=torch.float16)[1:],
        torch.empty(2, dtype=torch.float32),
        torch.empty(3, dtype=torch.bfloat16, device="cuda")[1:],
        torch.nn.Parameter(torch.empty(2, dtype=torch.float32, device="cuda"), requires_grad=False),
    ]
    ok, why = _C.launcher.enable_torch_reads(lib, [torch.Tensor, torch.nn.Parameter], probes)
    torch_reads_why = "" if ok else why


def stream_function():
    """device -> the current torch stream (raw handle); None (the default stream) without torch."""
    _current_stream(0)  # imports torch once, if it is there
    if not _torch:
        return None
    _enable_torch_reads(_torch)
    return getattr(_torch._C, "_cuda_getCurrentRawStream", None) or _current_stream


def load(kernel, device: int, num_warps: int, num_stages: int):
    """The runtime.LoadedKernel of `kernel` on `device` (loaded once); LaunchError when it
    needs more shared memory than the device allows per block."""
    debug = debug_mode()
    loaded = kernel.loaded.get((device, num_warps, num_stages, debug))
    if loaded is None:
        entry = binary(kernel, arch_of_device(device), num_warps, num_stages)
        kernel.asm.setdefault("ptx", entry.ptx)
        shared, info = entry.spec.shared_bytes, _R.device_info(device)
        if shared > info.max_shared_per_block_optin:
            raise LaunchError(
                f"{kernel.name}: needs {shared} bytes of shared memory with num_warps={num_warps}, "
                f"num_stages={num_stages}; {info.name} allows {info.max_shared_per_block_optin} per block "
                "(use fewer stages or smaller tiles)"
            )
        loaded = _R.LoadedKernel(device, entry.image, entry.spec)
        res, threads = loaded.resources(), entry.spec.num_threads
        if res.max_threads_per_block < threads:  # a PTX image the driver compiled: its registers
            raise LaunchError(
                f"{kernel.name}: needs {res.num_regs} registers per thread, which allows {res.max_threads_per_block} "
                f"threads per block on {info.name} ({info.max_registers_per_block} registers per block); it has "
                f"{threads} (num_warps={num_warps}: use fewer warps or smaller tiles)"
            )
        kernel.loaded[(device, num_warps, num_stages, debug)] = loaded
    return loaded


def launch(kernel, bound, grid, num_warps: int, num_stages: int, cooperative: bool = False):
    """Launches on the GPU of the arguments; returns the runtime.LoadedKernel. `cooperative`:
    every program resident at once (Triton's launch_cooperative_grid), or a LaunchError."""
    device = device_of(bound.values())
    _R.use_device(device)
    loaded = load(kernel, device, num_warps, num_stages)
    if cooperative:
        _check_resident(kernel, loaded, grid, device, num_warps)
    ptr = _R.ParamKind.ptr
    if debug_mode():
        return _launch_checked(kernel, loaded, bound, grid, device, num_warps, num_stages, cooperative)
    values = [_address(p.name, bound[p.name], device) if p.kind == ptr else bound[p.name] for p in loaded.spec.params]
    try:
        loaded.launch(grid, _current_stream(device), values, cooperative)
    except _R.TensorMapError as e:
        raise LaunchError(f"{kernel.name}: {e}") from None
    return loaded


def _check_resident(kernel, loaded, grid, device: int, num_warps: int):
    programs, most = grid[0] * grid[1] * grid[2], loaded.max_resident()
    if programs > most:
        info = _R.device_info(device)
        raise LaunchError(
            f"{kernel.name}: launch_cooperative_grid: {programs} programs cannot all be resident at once on "
            f"{info.name}: at most {most} ({most // info.multiprocessors} per SM x {info.multiprocessors} SMs at "
            f"num_warps={num_warps}, {loaded.spec.shared_bytes} bytes of shared memory each)"
        )


def buffer_extent(name, v, ptr: int) -> int:
    """Bytes from `ptr` (argument `name`'s data pointer) to the end of the memory it lies in:
    a torch tensor's storage, the buffer under a numpy array (its view, slice or offset
    included), else the driver's allocation of a device pointer."""
    if hasattr(v, "untyped_storage"):
        storage = v.untyped_storage()
        return storage.data_ptr() + storage.nbytes() - ptr
    if isinstance(v, np.ndarray):
        base = v
        while isinstance(base.base, np.ndarray):
            base = base.base
        return _byte_bounds(base)[1] - ptr
    end = _R.allocation_end(ptr)
    if end == 0:
        raise LaunchError(f"argument '{name}': TILEFUSE_DEBUG=1 cannot find the allocation of address {ptr:#x}")
    return end - ptr


def debug_message(check, record: list[int], names: list[str]) -> str:
    """The KernelRuntimeError text of a violation: `check` as lower()'s "checks" entry,
    `record` the words of the error record (LowerToLLVM.h: DebugCheck), in the words of
    the interpreter's bounds check."""
    _, _, _, what, param, elem_bytes, shape = check
    px, py, pz, lane, index = record[2], record[3], record[4], record[5], record[6]
    at = ""
    if shape:
        idx = []
        for n in reversed(shape):
            idx.append(lane % n)
            lane //= n
        at = " at element [" + ", ".join(str(i) for i in reversed(idx)) + "]"
    return (
        f"out-of-bounds {what}{at}: index {index} of '{names[param]}', which holds {record[7] // elem_bytes} "
        f"elements (program {px}, {py}, {pz})"
    )


def _launch_checked(kernel, loaded, bound, grid, device, num_warps, num_stages, cooperative=False):
    """A TILEFUSE_DEBUG=1 launch: each pointer's extent and a zeroed error record as the
    hidden parameters, then a synchronize and the record read back."""
    ptr = _R.ParamKind.ptr
    record = _R.DeviceBuffer(8 * _C.lower.DEBUG_RECORD_WORDS)
    values, extents, names = [], {}, [p.name for p in loaded.spec.params]
    for p in loaded.spec.params:
        if p.name == "__debug_record":
            values.append(record.ptr)
        elif p.name.startswith("__extent_"):
            values.append(extents[p.name.removeprefix("__extent_")])
        elif p.kind == ptr:
            values.append(_address(p.name, bound[p.name], device))
            extents[p.name] = buffer_extent(p.name, bound[p.name], values[-1])
        else:
            values.append(bound[p.name])
    loaded.launch(grid, _current_stream(device), values, cooperative)
    words = list(struct.unpack(f"<{_C.lower.DEBUG_RECORD_WORDS}q", record.read()))
    if words[0]:
        check = kernel.debug_checks[(loaded.spec.arch, num_warps, num_stages)][words[1]]
        words.append(extents[names[check[4]]])
        file, line, col = check[0], check[1], check[2]
        raise KernelRuntimeError(debug_message(check, words, names), file, line, col)
    return loaded
