"""TopK's selection in tensor expressions: the positions of a row's k best elements, in order.

te has no data-dependent loops or writes, so an element's place is counted, not found by
sorting: its rank is how many elements of the row beat it (a strict total order: value, then
lower index), and output r is the one element whose rank is r. Counted over the whole row
that costs n² compares per row ("direct"), fine for short rows, not for a detector's
thousands of boxes or an LLM's vocabulary. So longer rows are blocked: ranks within blocks of
B elements (n·B), each block's best min(k, B) in order (its candidates), and the ranks of the
candidates among all candidates (C² for C = n/B·min(k, B)). The row's top k are candidates
(an element beaten by fewer than k in the row is beaten by fewer than k in its block), and
every element that beats one of them is one too, so a candidate's rank among candidates is
its rank in the row. For k much smaller than n this is far below n² (n = 50k, k = 50:
~5e7 compares against 2.5e9); where k is a large part of n blocking saves nothing and the
direct form is used (a full sort would need a merge network of log² n stages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lowering import te

Index = tuple[te.Expr, ...]
MIN_BLOCK = 8
COUNT = "int32"  # ranks: rows are far shorter than 2^31 (shape inference caps tensors)


@dataclass(frozen=True)
class Order:
    """onnxruntime's order of TopK: by value (NaN above every number), ties by lower index."""

    largest: bool
    is_float: bool

    def better(self, a: te.Expr, b: te.Expr) -> te.Expr:
        """Whether value a comes strictly before value b."""
        core = te.gt(a, b) if self.largest else te.lt(a, b)
        if not self.is_float:
            return core
        # NaN is the largest value: first when largest, last when smallest
        first, second = (a, b) if self.largest else (b, a)
        nan_first = te.logical_and(te.ne(first, first), te.eq(second, second))
        return te.logical_or(core, nan_first)

    def beats(self, a: te.Expr, ia: te.Expr, b: te.Expr, ib: te.Expr) -> te.Expr:
        """Whether element (a at position ia) comes before element (b at ib)."""
        tie_won = te.logical_and(te.lt(ia, ib), te.unary("not", self.better(b, a)))
        return te.logical_or(self.better(a, b), tie_won)


def block_size(n: int, k: int) -> int | None:
    """The block length whose estimated compares are fewest, or None where direct wins."""
    best, cost = None, n * n + n * k
    b = MIN_BLOCK
    while b <= n // 2:
        cand = math.ceil(n / b) * min(k, b)
        c = n * b + n * min(k, b) + cand * cand + cand * k
        if c < cost:
            best, cost = b, c
        b *= 2
    return best


def _one() -> te.Expr:
    return te.Const(1, COUNT)


def _zero() -> te.Expr:
    return te.Const(0, COUNT)


def top_positions(x: te.Tensor, axis: int, k: int, order: Order) -> te.Tensor:
    """int64 positions along `axis` of each row's k best elements, best first."""
    n = x.shape[axis]
    out_shape = (*x.shape[:axis], k, *x.shape[axis + 1 :])

    def at(i: Index, j: te.Expr) -> Index:
        return (*i[:axis], j, *i[axis + 1 :])

    b = block_size(n, k)
    if b is None:
        ranks = ranks_along(x, axis, order)

        def pick(*o: te.Expr) -> te.Expr:
            r = te.reduce_axis(n, "j")
            hit = te.eq(ranks[at(o, r.var)], te.cast(COUNT, o[axis]))
            return te.reduce("max", te.select(hit, r.var, 0), [r], init=0)

        return te.compute(out_shape, pick, name="topk_indices")
    return _blocked(x, axis, k, order, b, out_shape)


def ranks_along(x: te.Tensor, axis: int, order: Order) -> te.Tensor:
    """Each element's rank along `axis` in `order` (0: the best; int32): how many elements of
    its row come before it, n compares each."""
    n = x.shape[axis]

    def rank(*i: te.Expr) -> te.Expr:
        r = te.reduce_axis(n, "j")
        beaten = order.beats(x[(*i[:axis], r.var, *i[axis + 1:])], r.var, x[i], i[axis])
        return te.reduce("sum", te.select(beaten, _one(), _zero()), [r])

    return te.compute(x.shape, rank, name="topk_rank")


def _blocked(x: te.Tensor, axis: int, k: int, order: Order, b: int,
             out_shape: tuple[int, ...]) -> te.Tensor:
    n = x.shape[axis]
    last = te.Const(n - 1, "int64")
    keep = min(k, b)
    blocks = math.ceil(n / b)
    cand_shape = (*x.shape[:axis], blocks, keep, *x.shape[axis + 1 :])

    def at(i: Index, j: te.Expr) -> Index:
        return (*i[:axis], j, *i[axis + 1 :])

    def row_at(c: Index, j: te.Expr) -> Index:
        """Candidate index c's row in x, at position j."""
        return (*c[:axis], j, *c[axis + 2 :])

    def cand_at(c: Index, blk: te.Expr, slot: te.Expr) -> Index:
        return (*c[:axis], blk, slot, *c[axis + 2 :])

    def local_rank(*i: te.Expr) -> te.Expr:
        t = te.reduce_axis(b, "t")
        j = (i[axis] // b) * b + t.var
        beaten = order.beats(x[at(i, te.minimum(j, last))], j, x[i], i[axis])
        return te.reduce("sum", te.select(te.logical_and(te.lt(j, n), beaten), _one(),
                                          _zero()), [t])

    ranks = te.compute(x.shape, local_rank, name="topk_block_rank")

    def block_pick(*c: te.Expr) -> te.Expr:
        """The position of the element ranked c[axis + 1] in block c[axis]; -1 past the end
        of a short last block."""
        t = te.reduce_axis(b, "t")
        j = c[axis] * b + t.var
        hit = te.logical_and(te.lt(j, n), te.eq(ranks[row_at(c, te.minimum(j, last))],
                                                te.cast(COUNT, c[axis + 1])))
        return te.reduce("max", te.select(hit, j, -1), [t], init=-1)

    pos = te.compute(cand_shape, block_pick, name="topk_candidates")
    vals = te.compute(cand_shape, lambda *c: x[row_at(c, te.maximum(pos[c], 0))],
                      name="topk_candidate_values")

    def cand_rank(*c: te.Expr) -> te.Expr:
        rb, rs = te.reduce_axis(blocks, "cb"), te.reduce_axis(keep, "cs")
        o = cand_at(c, rb.var, rs.var)
        beaten = te.logical_and(te.ge(pos[o], 0), order.beats(vals[o], pos[o], vals[c], pos[c]))
        return te.reduce("sum", te.select(beaten, _one(), _zero()), [rb, rs])

    cranks = te.compute(cand_shape, cand_rank, name="topk_candidate_rank")

    def pick(*o: te.Expr) -> te.Expr:
        rb, rs = te.reduce_axis(blocks, "cb"), te.reduce_axis(keep, "cs")
        c = (*o[:axis], rb.var, rs.var, *o[axis + 1 :])
        hit = te.logical_and(te.ge(pos[c], 0), te.eq(cranks[c], te.cast(COUNT, o[axis])))
        return te.reduce("max", te.select(hit, pos[c], 0), [rb, rs], init=0)

    return te.compute(out_shape, pick, name="topk_indices")
