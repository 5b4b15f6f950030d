"""tl.extra.cuda: the CUDA extensions of Triton's language."""

from . import libdevice  # noqa: F401
