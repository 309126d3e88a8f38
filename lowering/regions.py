"""Bound inference: the box of a tensor that a loop body reads, for `compute_at`.

Each read index is split into the loop variables under the attach point (`inner`, which sweep
their whole static extent) and the rest (fixed for one iteration of the attach loop). An index
affine in the inner variables sweeps `[rest + lo, rest + hi]`; several reads of one dimension
merge when their fixed parts differ by a constant. Anything else (a non-affine index, reads
with unrelated offsets) gets the whole dimension: the box is conservative, never too small.
The box is clipped to the tensor, so a producer never computes elements that do not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lowering import te
from lowering.affine import Affine, normalize

I64 = "int64"


@dataclass
class Region:
    start: list[te.Expr]  # first element per dimension (>= 0), an expression of outer loops
    extent: list[int]  # static size per dimension (an upper bound of the real size)
    bound: list[te.Expr | None]  # the real size where clipping at the tensor's edge can cut it


def _sweep(form: Affine, inner: dict[te.Var, int]) -> tuple[Affine, int, int] | None:
    """(fixed part, lowest and highest offset the inner variables add), or None."""
    lo = hi = 0
    fixed = Affine(form.const)
    for key, (atom, coef) in form.terms.items():
        if isinstance(atom, te.Var) and atom in inner:
            span = coef * (inner[atom] - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
        elif any(te.mentions(atom, v) for v in inner):
            return None  # an inner variable under a division: not affine
        else:
            fixed.terms[key] = (atom, coef)
    return fixed, lo, hi


def _dimension(indices: Sequence[te.Expr], size: int, inner: dict[te.Var, int],
               ranges: dict[te.Var, int]) -> tuple[te.Expr, int, te.Expr | None]:
    whole = (te.Const(0, I64), size, None)
    sweeps = []
    for e in indices:
        form = normalize(e)
        sw = None if form is None else _sweep(form, inner)
        if sw is None:
            return whole
        sweeps.append(sw)
    shape = {k: c for k, (_, c) in sweeps[0][0].terms.items()}
    if any({k: c for k, (_, c) in f.terms.items()} != shape for f, _, _ in sweeps):
        return whole
    lo = min(f.const + a for f, a, _ in sweeps)
    hi = max(f.const + b for f, _, b in sweeps)
    extent = hi - lo + 1
    if extent >= size:
        return whole
    fixed = Affine(lo, dict(sweeps[0][0].terms))
    start = fixed.to_expr()
    # range of `start` over the outer loops, to clip only where the box can leave the tensor
    smin = smax = lo
    known = True
    for atom, coef in fixed.terms.values():
        if not (isinstance(atom, te.Var) and atom in ranges):
            known = False
            break
        span = coef * (ranges[atom] - 1)
        smin, smax = smin + min(0, span), smax + max(0, span)
    clip_lo = not known or smin < 0
    clip_hi = not known or smax + extent > size
    if not (clip_lo or clip_hi):
        return start, extent, None
    first = te.maximum(start, te.Const(0, I64)) if clip_lo else start
    end = start + extent
    if clip_hi:
        end = te.minimum(end, te.Const(size, I64))
    return first, extent, end - first


def infer_region(reads: Sequence[Sequence[te.Expr]], shape: Sequence[int],
                 inner: dict[te.Var, int], ranges: dict[te.Var, int]) -> Region:
    """The box of a tensor of `shape` covering every read (one index list per read) while the
    `inner` variables sweep `[0, extent)`; `ranges` bounds the other loop variables."""
    out = Region([], [], [])
    for d, size in enumerate(shape):
        start, extent, bound = _dimension([r[d] for r in reads], size, inner, ranges)
        out.start.append(start)
        out.extent.append(extent)
        out.bound.append(bound)
    return out
