"""NonMaxSuppression: per batch and class, the boxes a greedy pass keeps in order of score, as
[batch, class, box] rows of the selected indices.

onnxruntime's rules, which are ONNX's: candidates are the boxes scoring above the score
threshold (all of them without one), best score first (equal scores: lower index first, as
TopK orders them); a candidate is kept unless a box kept before it in its class overlaps it
by an intersection over union above the IoU threshold, and a class stops at
max_output_boxes_per_class boxes (0 or absent: no boxes at all). Boxes are corner pairs in
any order (center_point_box 0: [y1, x1, y2, x2]) or [x_center, y_center, width, height]
(center_point_box 1); the overlap test is onnxruntime's float by float (boxes that do not
intersect, or of no area, never suppress).

Two parts: the greedy pass, which also sorts the candidates into score order (a hand-written
serial nest, lowering/nest.py: each decision depends on the ones before it), and the selected
rows written dense at the length the pass finds (run_length.py), the output's computed
length.
"""

from __future__ import annotations

from lowering import te
from lowering.loop_ir import Buffer, BufLoad, For, Seq, Stmt, Store
from lowering.nest import nest_stage
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import unflatten
from lowering.ops.reduce.topk_select import Order
from lowering.ops.run_length import dense, output_length, true_positions

I64 = "int64"


def _c(v: int) -> te.Const:
    return te.Const(v, I64)


def _f(v: float) -> te.Const:
    return te.Const(v, "float32")


def _extent(box: list[te.Expr], lo: int, hi: int, center: bool) -> tuple[te.Expr, te.Expr]:
    """(min, max) of a box along one axis: coordinates `lo` and `hi` of a corner pair, or
    centre `lo` and size `hi` (its half on either side)."""
    if center:
        half = box[hi] / _f(2.0)
        return box[lo] - half, box[lo] + half
    return te.minimum(box[lo], box[hi]), te.maximum(box[lo], box[hi])


def overlaps(a: list[te.Expr], b: list[te.Expr], center: bool, threshold: te.Expr) -> te.Expr:
    """Whether box `b` suppresses box `a` (four coordinates each): their intersection over
    union exceeds `threshold`, computed as onnxruntime does (x from coordinates 1 and 3 of
    corner pairs, 0 and 2 of centred boxes; y from the others)."""
    xs, ys = ((0, 2), (1, 3)) if center else ((1, 3), (0, 2))
    ax0, ax1 = _extent(a, *xs, center)
    bx0, bx1 = _extent(b, *xs, center)
    ay0, ay1 = _extent(a, *ys, center)
    by0, by1 = _extent(b, *ys, center)
    ix0, ix1 = te.maximum(ax0, bx0), te.minimum(ax1, bx1)
    iy0, iy1 = te.maximum(ay0, by0), te.minimum(ay1, by1)
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a = (ax1 - ax0) * (ay1 - ay0)
    area_b = (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    zero = _f(0.0)
    return te.all_of([te.gt(ix1, ix0), te.gt(iy1, iy0), te.gt(inter, zero),
                      te.gt(area_a, zero), te.gt(area_b, zero), te.gt(union, zero),
                      te.gt(inter / union, threshold)])


def _scalar(ctx: OpContext, i: int, default: float | int, dtype: str) -> te.Tensor | te.Expr:
    """Optional scalar input `i` ([] or [1]): its tensor, or the default as a constant."""
    if not ctx.has_input(i):
        return te.Const(default, dtype)
    t = ctx.input(i)
    if t.size != 1:
        raise ctx.error(f"input {i} must hold one value, it has shape {list(t.shape)}")
    return t


def _first(v: te.Tensor | te.Expr) -> te.Expr:
    return v[tuple(_c(0) for _ in v.shape)] if isinstance(v, te.Tensor) else v


@register_op("NonMaxSuppression")
def non_max_suppression(ctx: OpContext) -> list[te.Tensor]:
    boxes, scores = ctx.input(0), ctx.input(1)
    if boxes.dtype != "float32" or scores.dtype != "float32":
        raise ctx.error(f"boxes and scores must be float32, got {boxes.dtype} and {scores.dtype}")
    if len(boxes.shape) != 3 or boxes.shape[2] != 4 or len(scores.shape) != 3 or \
            scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ctx.error(f"boxes {list(boxes.shape)} and scores {list(scores.shape)} must be "
                        "[batches, boxes, 4] and [batches, classes, boxes]")
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise ctx.error(f"center_point_box must be 0 or 1, got {center}")
    nb, nc, n = scores.shape
    shape = tuple(ctx.out_shapes[0])
    if len(shape) != 2 or shape[1] != 3 or shape[0] > nb * nc * n:
        raise ctx.error(f"output shape {list(shape)} cannot hold the selected indices of "
                        f"{nb} x {nc} classes of {n} boxes")
    limit = _scalar(ctx, 2, 0, I64)
    iou = _scalar(ctx, 3, 0.0, "float32")
    floor = _scalar(ctx, 4, 0.0, "float32") if ctx.has_input(4) else None
    if ctx.has_input(3) and ctx.consts[3] is not None:
        value = float(ctx.const(3).reshape(-1)[0])
        if not 0.0 <= value <= 1.0:
            raise ctx.error(f"iou_threshold must be in [0, 1], got {value}")
    elif ctx.has_input(3) and ctx.checks is not None:
        t = _first(iou)
        pinned.require(ctx, te.all_of([te.ge(t, _f(0.0)), te.le(t, _f(1.0))]),
                       "iou_threshold must be in [0, 1]")
    reads = [boxes, scores] + [v for v in (limit, iou, floor) if isinstance(v, te.Tensor)]

    def write(out: Buffer, buffer_of, scratch) -> Stmt:
        return _greedy(out, buffer_of, scratch, (nb, nc, n), center, boxes, scores,
                       Order(largest=True, is_float=True), limit, iou, floor)

    # per candidate in score order: its box index + 1 where kept, else 0
    kept = nest_stage((nb, nc, n), I64, "nms_kept", reads, write)
    flags = te.compute((nb * nc * n,), lambda f: te.cast(I64, te.gt(
        kept[unflatten(f, (nb, nc, n))], _c(0))), name="nms_flags")
    where, count = true_positions(flags, max(shape[0], 1), "nms")
    if shape[0] == 0:  # no rows: nothing to write, unless the data select some (a check)
        if not _no_boxes(ctx):
            output_length(ctx, 0, 0, count)
        return [te.compute(shape, lambda *i: _c(0), name="nms")]
    length = output_length(ctx, 0, 0, count)

    def row(k: te.Expr, col: te.Expr) -> te.Expr:
        b, c, r = unflatten(where[k], (nb, nc, n))
        return pinned.pick([b, c, kept[b, c, r] - 1], col)

    return [dense(shape, 0, length, I64, row, "nms")]


def _no_boxes(ctx: OpContext) -> bool:
    """Whether max_output_boxes_per_class is absent or a constant of at most 0."""
    if not ctx.has_input(2):
        return True
    return ctx.consts[2] is not None and int(ctx.const(2).reshape(-1)[0]) <= 0


def _in_score_order(srt: Buffer, keys: Buffer, scratch, n: int, score, order: Order,
                    eligible) -> tuple[Stmt, int, te.Expr]:
    """The class's box indices whose score is `eligible` (above the score threshold), sorted
    into `order` (stable, so equal scores keep the lower index first, as TopK's order has it)
    by a bottom-up merge sort in log2(n) passes of loops (the loop IR has no while loop; runs
    past the candidates' count are empty), ping-ponging between the two halves of `srt` (2n).
    Each entry's score moves with it in `keys`, so a compare loads beside the index rather
    than through it. Boxes under the threshold are left out before sorting: a detector's
    classes keep few of their boxes. Returns the nest, the offset of the half that ends up
    sorted, and the candidates' count (an expression over a scratch)."""
    passes = max(1, (n - 1).bit_length())
    width, count = scratch("nms_sort_width", I64, (1,)), scratch("nms_sort_count", I64, (1,))
    i, p, blk, k = (te.Var(f"nms_sort_{v}") for v in ("i", "p", "blk", "k"))
    m = BufLoad(count, _c(0))
    w = BufLoad(width, _c(0))
    src, dst = (p % 2) * n, (_c(1) - p % 2) * n
    lo = te.minimum(blk * (w * 2), m)
    mid, hi = te.minimum(lo + w, m), te.minimum(lo + w * 2, m)

    def entry(at: te.Expr) -> tuple[te.Expr, te.Expr, te.Expr]:
        """(position, index, score) of the run entry at `at`, clamped into the buffer: a run
        that is used up is not taken from, but its entry is still loaded."""
        pos = src + te.maximum(te.minimum(at, _c(n - 1)), _c(0))
        return pos, BufLoad(srt, pos), BufLoad(keys, pos)

    # Both ends at once: the front takes the first of the two runs' heads, the back the last
    # of their tails, so each iteration runs two independent chains of loads and compares
    # (the order is strict, indices breaking ties, so the two meet at the same element).
    # The entry taken is read at an address computed from the choice, not chosen by a
    # select: LLVM turns a select between two loads into a branch, which random scores
    # mispredict.
    steps: list[Stmt] = []
    starts: list[Stmt] = []
    for end in ("front", "back"):
        lp, rp, took = (scratch(f"nms_sort_{end}_{v}", I64, (1,)) for v in ("left", "right",
                                                                             "took"))
        li, ri, t = BufLoad(lp, _c(0)), BufLoad(rp, _c(0)), BufLoad(took, _c(0))
        (at_l, a, sa), (at_r, b, sb) = entry(li), entry(ri)
        if end == "front":
            starts += [Store(lp, _c(0), lo), Store(rp, _c(0), mid)]
            take_left = te.logical_and(te.lt(li, mid), te.logical_or(
                te.ge(ri, hi), te.unary("not", order.beats(sb, b, sa, a))))
            at, move = dst + lo + k, _c(1)
        else:
            starts += [Store(lp, _c(0), mid - _c(1)), Store(rp, _c(0), hi - _c(1))]
            take_left = te.logical_and(te.ge(li, lo), te.logical_or(
                te.lt(ri, mid), order.beats(sb, b, sa, a)))
            at, move = dst + hi - _c(1) - k, _c(-1)
        pick = at_r + (at_l - at_r) * t
        steps += [
            Store(took, _c(0), te.cast(I64, take_left)),  # (once: the stores below move it)
            Store(srt, at, BufLoad(srt, pick)),
            Store(keys, at, BufLoad(keys, pick)),
            Store(rp, _c(0), ri + move * (_c(1) - t)),
            Store(lp, _c(0), li + move * t),
        ]
    merge = Seq([*starts, For(k, (hi - lo + _c(1)) // _c(2), "serial", Seq(steps))])
    nest = Seq([
        Store(count, _c(0), _c(0)),
        For(i, _c(n), "serial", Seq([  # the eligible boxes, packed in index order
            Store(srt, m, i), Store(keys, m, score(i)),
            Store(count, _c(0), m + te.cast(I64, eligible(i))),
        ])),
        Store(width, _c(0), _c(1)),
        For(p, _c(passes), "serial", Seq([
            For(blk, (m + w * 2 - _c(1)) // (w * 2), "serial", merge),
            Store(width, _c(0), w * 2),
        ])),
    ])
    return nest, (passes % 2) * n, m


def _greedy(out: Buffer, buffer_of, scratch, dims: tuple[int, int, int], center: int,
            boxes: te.Tensor, scores: te.Tensor, order: Order,
            limit: te.Tensor | te.Expr, iou: te.Tensor | te.Expr,
            floor: te.Tensor | te.Expr | None) -> Stmt:
    """The greedy pass: out[b, c, r] = the box index + 1 of the r-th candidate of (b, c) in
    score order where it is kept, else 0. Per class: the candidates (the boxes above the
    score threshold) sorted into score order (`_in_score_order`), then a serial loop over them, each compared with the boxes kept so far
    (listed in a scratch as they are kept), as onnxruntime's: n times the kept count overlap
    tests per class at most, and none past the class's limit or under the score threshold."""
    nb, nc, n = dims
    bb, sb = buffer_of(boxes), buffer_of(scores)
    count = scratch("nms_count", I64, (1,))
    hit = scratch("nms_hit", I64, (1,))
    srt = scratch("nms_order", I64, (2 * n,))
    keys = scratch("nms_order_scores", "float32", (2 * n,))
    kept = scratch("nms_kept_boxes", I64, (n,))

    def scalar(v: te.Tensor | te.Expr) -> te.Expr:
        return BufLoad(buffer_of(v), _c(0)) if isinstance(v, te.Tensor) else v

    most = te.maximum(scalar(limit), _c(0))
    threshold = scalar(iou)
    bc, r, q = te.Var("nms_bc"), te.Var("nms_r"), te.Var("nms_q")
    b = bc // nc

    def box(j: te.Expr) -> list[te.Expr]:
        return [BufLoad(bb, (b * n + j) * 4 + k) for k in range(4)]

    def score(j: te.Expr) -> te.Expr:
        return BufLoad(sb, bc * n + j)

    def above_floor(j: te.Expr) -> te.Expr:
        return te.Const(True, "bool") if floor is None else te.gt(score(j), scalar(floor))

    sort, sorted_at, candidates = _in_score_order(srt, keys, scratch, n, score, order,
                                                  above_floor)
    so_far = BufLoad(count, _c(0))
    cand = BufLoad(srt, _c(sorted_at) + te.minimum(r, _c(n - 1)))
    eligible = [te.lt(so_far, most), te.lt(r, candidates)]
    suppressed = overlaps(box(cand), box(BufLoad(kept, q)), bool(center), threshold)
    taken = _c(1) - BufLoad(hit, _c(0))
    ok = te.all_of(eligible)
    step = Seq([
        Store(hit, _c(0), te.select(ok, _c(0), _c(1))),
        # (an ineligible candidate, past the class's limit or under the score threshold,
        # compares with nothing)
        For(q, te.select(ok, so_far, _c(0)), "serial", Store(
            hit, _c(0), te.select(suppressed, _c(1), BufLoad(hit, _c(0))))),
        Store(out, bc * n + r, taken * (cand + _c(1))),
        Store(kept, so_far, cand),  # (overwritten by the next kept box if this one is not)
        Store(count, _c(0), so_far + taken),
    ])
    return For(bc, _c(nb * nc), "serial", Seq([sort, Store(count, _c(0), _c(0)),
                                               For(r, _c(n), "serial", step)]))
