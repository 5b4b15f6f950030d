"""tilefuse: a Triton-style tile DSL for NVIDIA GPUs with a compiler written in C++.

import tilefuse as tf
import tilefuse.language as tl

@tf.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

add[(tf.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
"""

from . import _C, language, testing  # noqa: F401
from . import jit as jit_module  # noqa: F401 - the module, for tests that patch it
from .autotune import Config, autotune, heuristics  # noqa: F401
from .defaults import __version__  # noqa: F401
from .errors import CompilationError, KernelRuntimeError, LaunchError, TilefuseError  # noqa: F401
from .jit import CompiledKernel, JITFunction, TensorWrapper, jit, reinterpret, select_backend  # noqa: F401


def cdiv(x: int, y: int) -> int:
    """Ceiling division of Python integers (for grids)."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (tile sizes must be powers of two)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
