"""BitCast: the input's bytes read as another type of the same width (a zero-copy alias).

Not in the element-wise family on purpose: fusion passes an element-wise operator's alias
through as the same te tensor, which would keep the old type.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import Alias, OpContext, register_op


@register_op("BitCast")
def bitcast(ctx: OpContext) -> list[te.Tensor | Alias]:
    src, dst = ctx.input(0).dtype, ctx.out_dtypes[0]
    if te.ITEMSIZE[src] != te.ITEMSIZE[dst]:
        raise ctx.error(f"BitCast from {src} to {dst}: the widths differ "
                        f"({te.ITEMSIZE[src]} vs {te.ITEMSIZE[dst]} bytes)")
    return [Alias(0)]
