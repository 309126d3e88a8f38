"""Einsum: products of operands summed over the labels the output leaves out.

Each contraction is one te compute, `out[kept] = sum over summed labels of prod(operands)`,
with every operand read in place through its labels (a transpose or a diagonal is an index
remap, a broadcast axis reads index 0). A two-operand contraction is thus a sum of a product
of two loads, the shape the GEMM template matches (`bij,bjk->bik`, `ij,kj->ik`, ...). More
operands are contracted left to right, each step keeping the labels a later operand or the
output still needs, so that a chain costs the sum of its pairwise products rather than the
product of every extent.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.linalg.einsum_spec import EquationError, Spec, parse

Term = tuple[te.Tensor, tuple[str, ...]]


def contract(terms: Sequence[Term], keep: Sequence[str], sizes: dict[str, int],
             name: str) -> te.Tensor:
    """`out[keep] = sum over the other labels of the product of the terms`."""
    summed = list(dict.fromkeys(lab for _, labels in terms for lab in labels
                                if lab not in keep))
    zero = te.Const(0, "int64")

    def body(*idx: te.Expr) -> te.Expr:
        axes = [te.reduce_axis(sizes[lab], "e") for lab in summed]
        env = dict(zip(keep, idx, strict=True)) | {
            lab: a.var for lab, a in zip(summed, axes, strict=True)}
        value: te.Expr | None = None
        for t, labels in terms:
            load = t[tuple(zero if n == 1 and sizes[lab] != 1 else env[lab]
                           for lab, n in zip(labels, t.shape, strict=True))]
            value = load if value is None else value * load
        assert value is not None
        return te.reduce("sum", value, axes) if axes else value

    return te.compute(tuple(sizes[lab] for lab in keep), body, name=name)


def evaluate(spec: Spec, operands: Sequence[te.Tensor]) -> te.Tensor:
    terms: list[Term] = list(zip(operands, spec.inputs, strict=True))
    acc = terms[0]
    for i, term in enumerate(terms[1:], start=1):
        later = {lab for _, labels in terms[i + 1 :] for lab in labels} | set(spec.output)
        if i == len(terms) - 1:
            keep = spec.output
        else:
            keep = tuple(dict.fromkeys(lab for lab in acc[1] + term[1] if lab in later))
        acc = (contract([acc, term], keep, spec.sizes, "einsum"), keep)
    if len(terms) == 1:
        return contract([acc], spec.output, spec.sizes, "einsum")
    return acc[0]


@register_op("Einsum")
def einsum(ctx: OpContext) -> list[te.Tensor]:
    operands = [ctx.input(i) for i in range(len(ctx.inputs))]
    if not operands:
        raise ctx.error("Einsum needs at least one operand")
    dtypes = {t.dtype for t in operands}
    if len(dtypes) != 1 or "bool" in dtypes:
        raise ctx.error(f"Einsum operands must share one numeric type, got {sorted(dtypes)}")
    equation = ctx.attr("equation")
    if isinstance(equation, bytes):
        equation = equation.decode()
    if not isinstance(equation, str):
        raise ctx.error("Einsum needs an 'equation' attribute")
    try:
        spec = parse(equation, [t.shape for t in operands])
    except EquationError as e:
        raise ctx.error(f"equation '{equation}': {e}") from None
    out = evaluate(spec, operands)
    if ctx.out_shapes and tuple(ctx.out_shapes[0]) != out.shape:
        raise ctx.error(f"equation '{equation}' gives shape {list(out.shape)}, the model "
                        f"says {list(ctx.out_shapes[0])}")
    return [out]
