"""Det: the determinant of each square matrix in the trailing two axes ([..., M, M] -> [...]).

te has no data-dependent control flow, so Gaussian elimination with partial pivoting is
unrolled over the M columns, each step a few stages over the whole batch: the largest |a| in
the column at or below the diagonal, the first row that holds it (the pivot), the matrix with
that row swapped into place and the rows below eliminated, and the running product of pivots
(negated per swap). The determinant is that product, as onnxruntime's LU (Eigen's partial
pivoting) gives it, up to rounding. A 1x1 matrix is its element and a 2x2 one ad - bc. A zero
pivot column (a singular matrix) leaves its rows as they are and gives 0 (a 0 pivot enters the
product); a column of NaNs picks the diagonal and the NaN propagates.

Matrices above MAX_ORDER are refused: each column adds stages, which the compile time pays for
several times over in the schedule search.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op

MAX_ORDER = 24


@register_op("Det")
def det(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"Det of {x.dtype} is not supported (floats only)")
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.error(f"input shape {list(x.shape)}: the last two axes must be square")
    m = x.shape[-1]
    batch = x.shape[:-2]
    if m > MAX_ORDER:
        raise ctx.error(f"Det of {m}x{m} matrices (at most {MAX_ORDER}x{MAX_ORDER})")
    dtype = x.dtype
    if m == 0:
        return [te.compute(batch, lambda *b: te.Const(1, dtype), name="det")]
    if m == 1:
        return [te.compute(batch, lambda *b: x[(*b, 0, 0)], name="det")]
    if m == 2:
        return [te.compute(batch, lambda *b: x[(*b, 0, 0)] * x[(*b, 1, 1)]
                           - x[(*b, 0, 1)] * x[(*b, 1, 0)], name="det")]

    a = x
    product: te.Tensor | None = None
    for k in range(m):
        rows = m - k

        def largest(*b: te.Var, a: te.Tensor = a, k: int = k, rows: int = rows) -> te.Expr:
            r = te.reduce_axis(rows, "r")
            return te.reduce_max(te.unary("abs", a[(*b, r.var + k, k)]), [r])

        peak = te.compute(batch, largest, name="det_peak")

        def first(*b: te.Var, a: te.Tensor = a, k: int = k, rows: int = rows,
                  peak: te.Tensor = peak) -> te.Expr:
            r = te.reduce_axis(rows, "r")
            hit = te.eq(te.unary("abs", a[(*b, r.var + k, k)]), peak[b])
            return te.reduce("min", te.select(hit, r.var + k, te.Const(m, "int64")), [r],
                             init=te.Const(m, "int64"))

        found = te.compute(batch, first, name="det_pivot")

        def pivot_row(b: tuple[te.Var, ...], found: te.Tensor = found,
                      k: int = k) -> te.Expr:
            p = found[b]  # m when no row matched (a NaN column): keep the diagonal
            return te.select(te.ge(p, m), te.Const(k, "int64"), p)

        def swapped(b: tuple[te.Var, ...], i: te.Expr, j: te.Expr, a: te.Tensor = a,
                    k: int = k, pivot_row=pivot_row) -> te.Expr:
            p = pivot_row(b)
            src = te.select(te.eq(i, k), p, te.select(te.eq(i, p), te.Const(k, "int64"), i))
            return a[(*b, src, j)]

        if k < m - 1:
            def eliminate(*o: te.Var, k: int = k, swapped=swapped) -> te.Expr:
                b, i, j = o[:-2], o[-2], o[-1]
                head = swapped(b, te.Const(k, "int64"), te.Const(k, "int64"))
                lead = swapped(b, i, te.Const(k, "int64"))
                factor = te.select(te.eq(head, te.Const(0, dtype)), te.Const(0, dtype),
                                   lead / head)
                v = swapped(b, i, j)
                below = te.logical_and(te.gt(i, k), te.gt(j, k))
                return te.select(below, v - factor * swapped(b, te.Const(k, "int64"), j), v)

            next_a = te.compute(x.shape, eliminate, name="det_eliminate")

        def accumulate(*b: te.Var, k: int = k, swapped=swapped, pivot_row=pivot_row,
                       product: te.Tensor | None = product) -> te.Expr:
            diag = swapped(b, te.Const(k, "int64"), te.Const(k, "int64"))
            signed = te.select(te.eq(pivot_row(b), k), diag, -diag)
            return signed if product is None else product[b] * signed

        product = te.compute(batch, accumulate, name="det_product")
        if k < m - 1:
            a = next_a
    assert product is not None
    return [product]
