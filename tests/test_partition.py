"""Boundary loop partitioning: a padding copy's innermost loop is split where its conditions
change, the middle piece loads in place without clamps, and results do not change."""

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import check_node  # noqa: E402

from lowering import te  # noqa: E402
from lowering.default_schedule import default_schedule  # noqa: E402
from lowering.loop_ir import Buffer, BufLoad, For, Seq, Store  # noqa: E402
from lowering.lower import lower_stage  # noqa: E402
from lowering.partition import partition_boundaries  # noqa: E402


def _pad_nest(width=10, before=2, after=3):
    x = te.placeholder((4, width), "float32", "x")

    def body(i, j):
        col = j - before
        inside = te.Binary("and", te.Binary("ge", col, te.Const(0, "int64")),
                           te.Binary("le", col, te.Const(width - 1, "int64")))
        clamped = te.minimum(te.maximum(col, te.Const(0, "int64")), te.Const(width - 1, "int64"))
        return te.select(inside, x[i, clamped], te.Const(0.0, "float32"))

    y = te.compute((4, width + before + after), body, "pad")
    bufs = {id(x): Buffer("x", "float32", x.shape, "input"),
            id(y): Buffer("y", "float32", y.shape, "output")}
    return lower_stage(default_schedule(y, 16), bufs)


def _innermost_nest(s):
    """The innermost loop whose body is not itself a loop."""
    while isinstance(s, For) and isinstance(s.body, For):
        s = s.body
    return s


def _mentions_op(e, ops):
    if isinstance(e, BufLoad):
        return _mentions_op(e.index, ops)
    if isinstance(e, te.Binary) and e.op in ops or isinstance(e, te.Select) and "select" in ops:
        return True
    return any(_mentions_op(c, ops) for c in te.children(e))


def test_padding_loop_split_into_zero_copy_zero():
    outer = _innermost_nest(partition_boundaries(_pad_nest()))
    pieces = outer.body if isinstance(outer, For) else outer
    assert isinstance(pieces, Seq) and len(pieces.stmts) == 3
    ranges = [(int(p.start.value), int(p.extent.value)) for p in pieces.stmts]
    assert ranges == [(0, 2), (2, 12), (12, 15)]
    left, middle, right = (p.body for p in pieces.stmts)
    assert isinstance(left, Store) and isinstance(left.value, te.Const)
    assert isinstance(right.value, te.Const)
    # the copy: a plain load, no select and no clamp left
    assert isinstance(middle.value, BufLoad)
    assert not _mentions_op(middle.value, ("min", "max", "select"))


def test_loops_without_boundary_conditions_are_kept():
    x = te.placeholder((8,), "float32", "x")
    y = te.compute((8,), lambda i: x[i] * 2.0, "double")
    bufs = {id(x): Buffer("x", "float32", x.shape, "input"),
            id(y): Buffer("y", "float32", y.shape, "output")}
    nest = lower_stage(default_schedule(y, 16), bufs)
    assert partition_boundaries(nest) == nest


def test_padded_operators_unchanged():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 9, 11)).astype(np.float32)
    check_node("Pad", [x, np.array([0, 0, 2, 1, 0, 0, 1, 3], np.int64)], consts=[1],
               mode="constant")
    check_node("MaxPool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    check_node("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
               count_include_pad=0)
