"""Tensorized GEMM template: any `C[b.., m.., n..] = sum_k A * B` (+ element-wise epilogue) on
the register-blocked micro-kernel intrinsic (`lowering/intrinsics.py`).

Layered one way: `pattern` (matching and its frozen analysis) → `cost` (the cost model) →
`build` (a configuration's kernel; window and pixel modes' nests in `conv_modes`) → `space`
(the knobs, and the space the search sees).

Matching is structural (AMOS-style): one sum-reduction stage whose body is the product of two
loads; the output axes that only the second operand reads form the trailing N group (flattened,
contiguous in the output), those only the first reads form the M group before it, and the rest
are batch loops. MatMul, Gemm (any transposes), batched MatMul and Conv (implicit GEMM: M =
output channels, N = output pixels, K = input channels x window) all match.

Operands reach the micro-kernel in one of these ways:
- "const": a compile-time constant operand, packed once by the compiler into micro-panels
  (A: [M/MR][K][MR], B: [N/NR][K][NR], zero-padded) — weights cost nothing to pack at run time;
- "direct": read in place when its flat index is affine in (m, k) / (k, n) with B contiguous
  in n (plain MatMul operands, 1x1 stride-1 convolutions);
- "pack": copied into micro-panels by the kernel itself (im2col for other convolutions);
- "window" (B of a convolution whose window reads the input with unit stride along the output
  width): no im2col. The output pixels are numbered in the input's row pitch ("virtual"
  columns `oh * Wp + ow`, a few per row past the output width computed and thrown away), so
  for each filter tap and input channel the B row is one contiguous run of the (padded) input,
  shifted by the tap's offset; the taps become outer loops around micro-kernel calls that
  accumulate into a virtual-column scratch, and the epilogue compacts it into the output.
  The input is read in place, once per tap, instead of being copied nine times over.
- "pixels" (a convolution with constant weights): the roles swapped, on the convolution
  micro-kernel (`_ConvWriter`): output pixels are its rows, read in place from the (padded)
  input, output channels its vectors, the reduction over taps and channels stays in registers
  and the tile is stored transposed into the output (see `_Builder._pixels_main`).
The epilogue (bias, activation, residual, the conv bias of the reduction's init) is applied to
each output panel right after the micro-kernels wrote it, while it is still in cache.
"""

from lowering.templates.gemm.cost import A_STREAMS_OVERLAPPED, KC_OPTIONS
from lowering.templates.gemm.pattern import GemmPattern, PixelTiling, analyze
from lowering.templates.gemm.space import GemmSpace, GemmTemplate

__all__ = ["A_STREAMS_OVERLAPPED", "KC_OPTIONS", "GemmPattern", "GemmSpace", "GemmTemplate",
           "PixelTiling", "analyze"]
