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

Two parts: the greedy pass, which also takes the candidates in score order (a hand-written
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


class _CandidateHeap:
    """A class's candidates (the boxes above the score threshold) in a binary heap whose root
    comes first in `order` (the best score, ties the lower index), so that the greedy pass
    takes them in score order one at a time and stops at the class's limit: built in O(m)
    (Floyd's, sifting the inner nodes down from the last), each take a sift of at most
    log2(m) steps, where sorting the whole class cost m log m compares per class.

    The loop IR has no while loop: a sift runs as many steps as levels lie below its start
    (the heap's height, tracked as it shrinks, for a take), whose moves stop once the item has
    settled (`done`); each step's choice is arithmetic on the index of the entry moved,
    not a select between loads, which LLVM would turn into a branch that random scores
    mispredict."""

    def __init__(self, scratch, n: int, order: Order) -> None:
        self.n, self.order = n, order
        self.idx = scratch("nms_heap", I64, (n,))
        self.key = scratch("nms_heap_scores", "float32", (n,))
        self.size, self.pos, self.child, self.move, self.done, self.item, self.height = (
            scratch(f"nms_heap_{v}", I64, (1,)) for v in (
                "size", "pos", "child", "move", "done", "item", "height"))
        self.item_key = scratch("nms_heap_item_score", "float32", (1,))
        self.levels = max(1, n.bit_length())

    def count(self) -> te.Expr:
        return BufLoad(self.size, _c(0))

    def _at(self, j: te.Expr) -> tuple[te.Expr, te.Expr]:
        jj = te.minimum(j, _c(self.n - 1))  # (a child past the end is loaded, never moved)
        return BufLoad(self.idx, jj), BufLoad(self.key, jj)

    def fill(self, score, eligible) -> Stmt:
        """The eligible boxes in index order (a heap only once `build` has run)."""
        i = te.Var("nms_heap_i")
        m = self.count()
        return Seq([Store(self.size, _c(0), _c(0)), For(i, _c(self.n), "serial", Seq([
            Store(self.idx, m, i), Store(self.key, m, score(i)),
            Store(self.size, _c(0), m + te.cast(I64, eligible(i))),
        ]))])

    def _sift(self, size: te.Expr, run: te.Expr) -> Stmt:
        """The held item (`item`, `item_key`) sifted down from `pos` in a heap of `size`
        entries, `run` steps at most."""
        pos, child = BufLoad(self.pos, _c(0)), BufLoad(self.child, _c(0))
        mv, ei, ek = BufLoad(self.move, _c(0)), BufLoad(self.item, _c(0)), \
            BufLoad(self.item_key, _c(0))
        c1 = pos * _c(2) + _c(1)
        (i1, k1), (i2, k2) = self._at(c1), self._at(c1 + _c(1))
        right = te.logical_and(te.lt(c1 + _c(1), size), self.order.beats(k2, i2, k1, i1))
        ci, ck = self._at(child)
        moves = te.all_of([te.lt(c1, size), te.eq(BufLoad(self.done, _c(0)), _c(0)),
                           self.order.beats(ck, ci, ek, ei)])
        src = pos + (child - pos) * mv  # the child moved up, else the entry stays
        level = te.Var("nms_heap_level")
        return Seq([
            Store(self.done, _c(0), _c(0)),
            For(level, run, "serial", Seq([
                Store(self.child, _c(0), c1 + te.cast(I64, right)),
                Store(self.move, _c(0), te.cast(I64, moves)),
                Store(self.idx, pos, BufLoad(self.idx, src)),
                Store(self.key, pos, BufLoad(self.key, src)),
                Store(self.done, _c(0), _c(1) - mv),
                Store(self.pos, _c(0), src),
            ])),
            Store(self.idx, pos, ei), Store(self.key, pos, ek),
        ])

    def build(self) -> Stmt:
        """Floyd's: the inner nodes sifted down, a depth at a time from the deepest, each
        for as many steps as levels lie below its depth (most nodes sit near the bottom, so
        the heap costs O(m) steps, where `levels` steps for every node cost m log m)."""
        m = self.count()
        depths = []
        for d in range(self.levels - 2, -1, -1):
            j = te.Var(f"nms_heap_j{d}")
            lo, hi = _c((1 << d) - 1), te.minimum(_c((1 << (d + 1)) - 1), m // _c(2))
            start = hi - _c(1) - j
            depths.append(For(j, te.maximum(hi - lo, _c(0)), "serial", Seq([
                Store(self.pos, _c(0), start),
                Store(self.item, _c(0), BufLoad(self.idx, start)),
                Store(self.item_key, _c(0), BufLoad(self.key, start)),
                self._sift(m, _c(self.levels - 1 - d)),
            ])))
        # the heap's height: floor(log2(m)), 0 when empty
        height = _c(0)
        for d in range(1, self.levels):
            height = height + te.cast(I64, te.le(_c(1 << d), m))
        return Seq([*depths, Store(self.height, _c(0), height)])

    def top(self) -> te.Expr:
        return BufLoad(self.idx, _c(0))

    def pop(self, size: te.Expr, when: te.Expr) -> Stmt:
        """The root taken from a heap of `size` entries when `when` (else nothing changes):
        the last entry sifted down from the root."""
        last = te.maximum(size - _c(1), _c(0))
        height = BufLoad(self.height, _c(0))
        # the heap loses a level when what is left falls below 2^height (the shift's count
        # kept in range: the height drops to -1 once the last entry is taken)
        span = te.binary("shl", _c(1), te.maximum(height, _c(0)))
        lower = te.logical_and(when, te.lt(last, span))
        return Seq([
            Store(self.height, _c(0), height - te.cast(I64, lower)),
            Store(self.pos, _c(0), _c(0)),
            Store(self.item, _c(0), te.select(when, BufLoad(self.idx, last), self.top())),
            Store(self.item_key, _c(0), te.select(when, BufLoad(self.key, last),
                                                  BufLoad(self.key, _c(0)))),
            self._sift(last, te.select(when, te.maximum(height, _c(0)), _c(0))),
        ])


def _greedy(out: Buffer, buffer_of, scratch, dims: tuple[int, int, int], center: int,
            boxes: te.Tensor, scores: te.Tensor, order: Order,
            limit: te.Tensor | te.Expr, iou: te.Tensor | te.Expr,
            floor: te.Tensor | te.Expr | None) -> Stmt:
    """The greedy pass: out[b, c, r] = the box index + 1 of the r-th candidate of (b, c) in
    score order where it is kept, else 0. Per class: the candidates (the boxes above the
    score threshold) in a heap (`_CandidateHeap`), taken in score order by a serial loop,
    each compared with the boxes kept so far (their coordinates stored as they are kept), as
    onnxruntime's: n times the kept count overlap tests per class at most, and none past the
    class's limit or its candidates."""
    nb, nc, n = dims
    bb, sb = buffer_of(boxes), buffer_of(scores)
    count = scratch("nms_count", I64, (1,))
    hit = scratch("nms_hit", I64, (1,))
    # the kept boxes' coordinates, one array per coordinate: the overlap tests against them
    # are a vector loop over contiguous loads
    kept = [scratch(f"nms_kept_{k}", "float32", (n,)) for k in range(4)]

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

    # (with a score threshold no candidate is NaN: NaN > threshold is false, so plain
    # comparisons order them)
    heap = _CandidateHeap(scratch, n, order if floor is None else
                          Order(largest=order.largest, is_float=False))
    candidates = heap.count()
    so_far = BufLoad(count, _c(0))
    cand = heap.top()
    eligible = [te.lt(so_far, most), te.lt(r, candidates)]
    suppressed = overlaps(box(cand), [BufLoad(kb, q) for kb in kept], bool(center), threshold)
    taken = _c(1) - BufLoad(hit, _c(0))
    ok = te.all_of(eligible)
    step = Seq([
        Store(hit, _c(0), te.select(ok, _c(0), _c(1))),
        # (an ineligible step, past the class's limit or its candidates, compares with
        # nothing)
        For(q, te.select(ok, so_far, _c(0)), "vectorize", Store(  # (an OR reduction)
            hit, _c(0), te.binary("or", BufLoad(hit, _c(0)), te.cast(I64, suppressed)))),
        Store(out, bc * n + r, taken * (cand + _c(1))),
        # (overwritten by the next kept box if this one is not)
        *[Store(kb, so_far, coord) for kb, coord in zip(kept, box(cand), strict=True)],
        Store(count, _c(0), so_far + taken),
        heap.pop(candidates - r, ok),  # (the candidates before r were all taken)
    ])
    return For(bc, _c(nb * nc), "serial", Seq([
        heap.fill(score, above_floor), heap.build(), Store(count, _c(0), _c(0)),
        For(r, _c(n), "serial", step)]))
