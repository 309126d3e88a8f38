"""Integer GEMM and convolution on the target's integer dot instructions (see space.py)."""

from lowering.templates.int_gemm.space import IntGemmSpace, IntGemmTemplate

__all__ = ["IntGemmSpace", "IntGemmTemplate"]
