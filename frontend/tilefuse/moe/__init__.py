"""tilefuse.moe: the MoE grouped MLP library's host API (../shared/SPEC-moe.md §7).
The kernels are @jit kernels under kernels_dsl/moe/; these modules check arguments,
allocate outputs, pick configs and launch."""

from .activations import (  # noqa: F401
    ACTIVATIONS,
    ActConfig,
    Activation,
    register,
    scaled_act,
    scaled_act_backward,
)
from .dispatch import (  # noqa: F401
    Routing,
    combine,
    combine_backward,
    dispatch,
    dispatch_backward,
    dispatch_weights,
    dispatch_weights_backward,
    route,
)
from .fused import fc1_forward, fc2_dgrad  # noqa: F401
from .grouped_gemm import GemmConfig, grouped_gemm, grouped_gemm_dgrad, grouped_gemm_wgrad  # noqa: F401
from .mlp import MLPConfig, MLPContext, backward_dw, mlp_backward, mlp_forward  # noqa: F401
from .quant import Quantized, dequantize, quantize  # noqa: F401

# Names whose modules need torch, imported on first use (tilefuse imports without torch).
_LAZY = {"ExpertParallelMLP": ".parallel", "LocalExperts": ".parallel", "GroupedMLP": ".module"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'tilefuse.moe' has no attribute {name!r}")
