"""Depthwise 2-D convolution and 2-D pooling template: a window reduction with no channel
reduction, NCHW.

Matched from the tensor expressions: one reduction over exactly two window axes whose body is
`src[n, chan(k), oh*s0 + r0*d0 + c0, ow*s1 + r1*d1 + c1] * w[k, ..., r0, r1]` (a sum: depthwise
convolution) or `src[..]` alone (a sum: average pooling; a max: max pooling), with `src` the
input itself or a copy of it padded with the combiner's identity (a `select` on conditions of
the padded positions only), plus at most one element-wise epilogue stage reading the result at
its own index (an average pool's division by its count). Strides, dilations, pads and channel
multipliers all follow from those index expressions.

The kernel reads the unpadded input directly. Output rows and columns are cut into runs that
see the same set of in-bounds taps (computed from the padding condition, per axis): the
interior run has every tap and is vectorised over `ow` with all kh x kw taps unrolled and no
conditions; the border runs (a few rows/columns) drop their out-of-bounds taps at compile
time. Taps are summed in the reduction's own order (init, then r0, r1), so results equal the
default schedule's; maxima, exactly associative, combine as a balanced tree (same results).
Knob `rows`: output rows computed per interior iteration (they share input rows).

At stride 1 the knob `plane` offers two forms that run the window as ONE vector loop over a
plane, so short rows (7x7, 14x14) no longer pay a loop and two scalar borders per row:
`padded_kernel` copies each plane into a scratch with its padding and loops in the padded row
pitch; `masked_kernel` (small planes whose input and output rows share a pitch) loops over the
outputs with each tap masked by the output's row and column.

Layered one way: `pattern` (matching, frozen analysis) → `forms` (which forms apply) →
`build` (a form's kernel) → `space` (the knobs, the cost model, the template entry).
"""

from lowering.templates.depthwise.build import chained_sum
from lowering.templates.depthwise.forms import exact_in_float
from lowering.templates.depthwise.pattern import DepthwisePattern, analyze
from lowering.templates.depthwise.space import DepthwiseSpace, DepthwiseTemplate

__all__ = ["DepthwisePattern", "DepthwiseSpace", "DepthwiseTemplate", "analyze", "chained_sum",
           "exact_in_float"]
