"""Arrays for bench/moe_bench.py on either backend: CUDA torch tensors (the GPU: timing,
torch peers) or numpy arrays (the CPU interpreter: checks only, numpy peers). The
references and checks are written once against the operations both share (`xp`: exp,
where, clip, reshape, @, .T, sum)."""

import ml_dtypes
import numpy as np

try:
    import torch
except ImportError:  # the CPU interpreter's CI
    torch = None

BF16 = ml_dtypes.bfloat16
FLUSH_BYTES = 256 << 20  # written before each timed call: more than the H200's 50 MB L2


class Backend:
    gpu = False

    @staticmethod
    def pick():
        return GpuBackend() if torch is not None and torch.cuda.is_available() else CpuBackend()


class CpuBackend(Backend):
    xp = np

    def __init__(self):
        self.rng = np.random.default_rng(1)

    def describe(self):
        return "CPU interpreter (numpy; torch peers unavailable)"

    def randn(self, shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(BF16)

    def rand(self, shape):
        return (1.0 - self.rng.random(shape)).astype(np.float32)  # (0, 1]

    def int32(self, values):
        return np.array(values, np.int32)

    def f64(self, a):
        return np.asarray(a, np.float64)

    def f32(self, a):
        return np.asarray(a, np.float32)

    def bf16(self, a):
        return np.asarray(a).astype(BF16)

    def zeros(self, shape, like):
        return np.zeros(shape, like.dtype)

    def cat(self, parts, axis=0):
        return np.concatenate(parts, axis=axis)

    def stack(self, parts, axis):
        return np.stack(parts, axis=axis)

    def scalar(self, v):
        return float(v)

    def all_finite(self, a):
        return bool(np.isfinite(np.asarray(a, np.float32)).all())

    def sync(self):
        pass

    def free(self):
        pass

    def time_samples(self, fn, reps):
        raise RuntimeError("timing needs a CUDA GPU")


class GpuBackend(Backend):
    gpu = True
    xp = torch

    def __init__(self):
        self.gen = torch.Generator(device="cuda").manual_seed(1)
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def describe(self):
        p = torch.cuda.get_device_properties(0)
        import triton

        return f"{p.name} ({p.multi_processor_count} SMs), torch {torch.__version__}, triton {triton.__version__}"

    def randn(self, shape, scale=1.0):
        return (torch.randn(shape, generator=self.gen, device="cuda") * scale).to(torch.bfloat16)

    def rand(self, shape):
        return 1.0 - torch.rand(shape, generator=self.gen, device="cuda")

    def int32(self, values):
        return torch.tensor(values, dtype=torch.int32, device="cuda")

    def f64(self, a):
        return a.double()

    def f32(self, a):
        return a.float()

    def bf16(self, a):
        return a.to(torch.bfloat16)

    def zeros(self, shape, like):
        return torch.zeros(shape, dtype=like.dtype, device=like.device)

    def cat(self, parts, axis=0):
        return torch.cat(parts, dim=axis)

    def stack(self, parts, axis):
        return torch.stack(parts, dim=axis)

    def scalar(self, v):
        return float(v.item()) if hasattr(v, "item") else float(v)

    def all_finite(self, a):
        return bool(torch.isfinite(a.float()).all().item())

    def sync(self):
        torch.cuda.synchronize()

    def free(self):
        torch.cuda.empty_cache()

    def time_samples(self, fn, reps):
        """`reps` CUDA-event timings (ms) of fn, L2 flushed (outside the events) before each."""
        times = []
        for _ in range(reps):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return times


def error_rms(backend, pairs):
    """sqrt(Σ (got - ref)²) / sqrt(Σ ref²) over (got, ref) pairs of float64 arrays; inf when
    any got is not finite (a NaN would otherwise hide in the sums)."""
    num = den = 0.0
    for got, ref in pairs:
        if not backend.all_finite(got):
            return float("inf")
        num += backend.scalar(((got - ref) ** 2).sum())
        den += backend.scalar((ref**2).sum())
    return (num / den) ** 0.5 if den > 0 else (0.0 if num == 0 else float("inf"))


def check_groups(backend, splits):
    """The experts whose rows a check compares: all on the interpreter; on the GPU the
    first, the largest, the middle and the last (the float64 reference of four experts
    costs little beside the timed runs)."""
    g = len(splits)
    if not backend.gpu:
        return list(range(g))
    return sorted({0, int(np.argmax(splits)), g // 2, g - 1})


def offsets(splits):
    return np.concatenate([[0], np.cumsum(splits)]).astype(np.int64)
