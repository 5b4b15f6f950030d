"""Defined once: the package version (pyproject.toml reads it from here) and the launch
defaults that jit, gpu and the C++ launch fast path take."""

__version__ = "0.1.0"

NUM_WARPS = 4
NUM_STAGES = 3
