"""tl.extra: Triton's vendor extensions; `libdevice` is the CUDA one (tl.extra.cuda.libdevice)."""

from . import cuda  # noqa: F401
from .cuda import libdevice  # noqa: F401
