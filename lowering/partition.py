"""Boundary loop partitioning (Halide's specialisation of boundary conditions).

A padding copy stores `select(0 <= x - p <= W - 1 and .., in[clamp(x - p, 0, W - 1)], 0)`
along its innermost loop. Vectorised as written, every element pays the condition and the
clamped index turns the load into a gather (measured: 4 cycles per element, 10-13 % of a 3x3
convolution). An innermost loop whose stored value selects on conditions affine in the loop
variable alone is split here at the points where those conditions change; in each piece the
conditions are constants, the select folds to one branch, and clamps of the loop variable that
the piece's range makes no-ops are dropped, so the middle piece is a contiguous copy.
"""

from __future__ import annotations

from dataclasses import replace

from lowering import te
from lowering.affine import interval, normalize
from lowering.loop_ir import BufLoad, For, Kernel, Seq, Stmt, Store

# More pieces than this: leave the loop alone (conditions this fragmented are not padding).
MAX_PIECES = 5


def partition_kernel(k: Kernel) -> Kernel:
    return Kernel(k.name, k.buffers, [partition_boundaries(s) for s in k.stages])


def partition_boundaries(s: Stmt) -> Stmt:
    if isinstance(s, Seq):
        return Seq([partition_boundaries(x) for x in s.stmts])
    if not isinstance(s, For):
        return s
    if isinstance(s.body, Store):
        return _partition(s) or s
    return replace(s, body=partition_boundaries(s.body))


def _is_index(e: te.Expr) -> bool:
    return e.dtype in ("int64", "int32")


def _const(e: te.Expr) -> int | None:
    if not _is_index(e):
        return None
    f = normalize(e)
    return f.const if f is not None and not f.terms else None


def _offset_of(e: te.Expr, v: te.Var) -> tuple[int, int] | None:
    """(coef, const) when `e` is coef * v + const with coef = +-1."""
    if not _is_index(e):
        return None
    f = normalize(e)
    if f is None or len(f.terms) != 1:
        return None
    c = f.coefficient(v)
    return (c, f.const) if c in (1, -1) else None


def _bound(cond: te.Expr, v: te.Var) -> tuple[int, int] | None:
    """The range [lo, hi) of `v` where comparison `cond` holds, when it depends on v alone."""
    if not (isinstance(cond, te.Binary) and cond.op in ("lt", "le", "gt", "ge")
            and _is_index(cond.a) and _is_index(cond.b)):
        return None
    d = _offset_of(cond.a - cond.b, v)
    if d is None:
        return None
    coef, c = d  # cond: coef * v + c (op) 0, i.e. v (op, flipped when coef = -1) k
    op = cond.op if coef == 1 else {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[cond.op]
    k = -c * coef
    big = 1 << 62
    return {"lt": (-big, k), "le": (-big, k + 1), "gt": (k + 1, big), "ge": (k, big)}[op]


def _selects(e: te.Expr, out: list[te.Select]) -> list[te.Select]:
    if isinstance(e, te.Select):
        out.append(e)
    for c in te.children(e):
        _selects(c, out)
    return out


def _partition(loop: For) -> Stmt | None:
    assert isinstance(loop.body, Store)
    v = loop.var
    start, extent = _const(loop.start), _const(loop.extent)
    if start is None or extent is None:
        return None
    bounds: dict[int, tuple[int, int]] = {}  # id(conjunct) -> range where it holds
    for sel in _selects(loop.body.value, []):
        for c in te.conjuncts(sel.cond):
            r = _bound(c, v)
            if r is not None:
                bounds[id(c)] = r
    if not bounds:
        return None
    cuts = sorted({x for lo, hi in bounds.values() for x in (lo, hi) if start < x < extent})
    if not cuts or len(cuts) + 1 > MAX_PIECES:
        return None
    edges = [start, *cuts, extent]
    pieces: list[Stmt] = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        truth = {k: r[0] <= lo and hi <= r[1] for k, r in bounds.items()}
        st = loop.body
        value = _fold(st.value, truth, v, lo, hi)
        index = _fold(st.index, truth, v, lo, hi)
        pieces.append(replace(loop, extent=te.Const(hi, "int64"), start=te.Const(lo, "int64"),
                              body=Store(st.buf, index, value)))
    return Seq(pieces)


def _fold(e: te.Expr, truth: dict[int, bool], v: te.Var, lo: int, hi: int) -> te.Expr:
    """`e` on the piece [lo, hi): decided conditions replaced, selects and clamps folded."""
    if isinstance(e, te.Select):
        cond = _fold_cond(e.cond, truth)
        if cond is True:
            return _fold(e.t, truth, v, lo, hi)
        if cond is False:
            return _fold(e.f, truth, v, lo, hi)
        return te.Select(cond, _fold(e.t, truth, v, lo, hi), _fold(e.f, truth, v, lo, hi))
    if isinstance(e, BufLoad):
        return BufLoad(e.buf, _fold(e.index, truth, v, lo, hi))
    out = te.map_children(e, lambda c: _fold(c, truth, v, lo, hi))
    if isinstance(out, te.Binary) and out.op in ("min", "max"):
        return _fold_clamp(out, v, lo, hi)
    return out


def _fold_cond(e: te.Expr, truth: dict[int, bool]) -> te.Expr | bool:
    if id(e) in truth:
        return truth[id(e)]
    if isinstance(e, te.Binary) and e.op == "and":
        a, b = _fold_cond(e.a, truth), _fold_cond(e.b, truth)
        if a is False or b is False:
            return False
        if a is True:
            return b
        if b is True:
            return a
        return te.Binary("and", a, b)
    return e


def _fold_clamp(e: te.Binary, v: te.Var, lo: int, hi: int) -> te.Expr:
    """An index min(a, b) / max(a, b) whose answer the piece's range decides."""
    if not _is_index(e):
        return e
    ranges = {v: (lo, hi - 1)}
    ra, rb = interval(e.a, ranges), interval(e.b, ranges)
    if ra is None or rb is None:
        return e
    if e.op == "min":
        if ra[1] <= rb[0]:
            return e.a
        if rb[1] <= ra[0]:
            return e.b
    else:
        if ra[0] >= rb[1]:
            return e.a
        if rb[0] >= ra[1]:
            return e.b
    return e
