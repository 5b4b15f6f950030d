"""Triton's tutorial kernels (vector add, fused softmax, matmul, layer norm) written in tilefuse."""
