"""Row-wise (softmax/layernorm/trailing reductions) and depthwise-convolution templates.

Whole-pipeline checks against onnxruntime on odd shapes (rows not a multiple of the vector
width, one row, stride 2, pads 0/1/2, dilation, channel multiplier), a check that the template
(not the default space) built the kernel, every knob configuration against numpy, the structure
the templates promise (one loop over rows; exp computed once per element; no conditions in the
depthwise interior) and computations the templates must leave to the default space.
"""

import itertools
import math
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from kernel_harness import run_kernel  # noqa: E402
from program_runner import check_node  # noqa: E402

from lowering import loop_ir, te  # noqa: E402
from lowering.loop_ir import For, Kernel, Seq, format_kernel  # noqa: E402
from lowering.ops import OPS, OpContext  # noqa: E402
from lowering.ops.nn.conv import conv_compute  # noqa: E402
from lowering.ops.nn.geometry import Window, window_source  # noqa: E402
from lowering.search import select  # noqa: E402
from targets.cpu.target import NAMED_TARGETS, host_target  # noqa: E402

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def lowered(op, inputs, attrs, out_shapes, consts=None):
    """Tensor expressions of one operator on placeholders of the given shapes."""
    phs = [te.placeholder(a.shape, "float32", f"in{i}") for i, a in enumerate(inputs)]
    ctx = OpContext(node="n", op_type=op, attrs=attrs, inputs=phs,
                    consts=consts or [None] * len(phs), out_shapes=out_shapes,
                    out_dtypes=["float32"] * len(out_shapes), file=None)
    return phs, OPS[op](ctx)


def space_kind(phs, outs):
    return select.space_for(phs, outs, [None] * len(phs), host_target()).kind


def all_configs(space):
    names = [k.name for k in space.knobs]
    return [dict(zip(names, vals, strict=True))
            for vals in itertools.product(*(k.options for k in space.knobs))]


# Row template ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape", [(5, 37), (1, 200), (2, 3, 129), (3, 1000)])
def test_softmax_rows(op, shape):
    x = rand(*shape) * 4
    phs, outs = lowered(op, [x], {"axis": -1}, [shape])
    assert space_kind(phs, outs) == "rows"
    check_node(op, [x], axis=-1)


def test_softmax_extremes_rows():
    x = rand(4, 40)
    x[0] = -np.inf
    x[1, 3] = np.inf
    x[2, :5] = 80.0
    check_node("Softmax", [x], axis=-1)


@pytest.mark.parametrize("shape,axis,norm", [((6, 37), -1, (37,)), ((2, 3, 5, 7), 2, (5, 7)),
                                             ((1, 100), 1, (100,))])
def test_layernorm_rows(shape, axis, norm):
    x, scale, bias = rand(*shape) * 3 + 1, rand(*norm), rand(*norm)
    phs, outs = lowered("LayerNormalization", [x, scale, bias], {"axis": axis}, [shape])
    assert space_kind(phs, outs) == "rows"
    check_node("LayerNormalization", [x, scale, bias], consts={1, 2}, axis=axis)


def test_layernorm_stats_rows():
    x, scale = rand(3, 4, 21), rand(21)
    check_node("LayerNormalization", [x, scale], consts={1}, axis=-1, n_out=3)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_trailing_reductions_rows(op, keepdims):
    x = rand(7, 45)
    axes = np.array([-1], dtype=np.int64)
    check_node(op, [x, axes], consts={1}, keepdims=keepdims)


def test_argmax_rows():
    check_node("ArgMax", [rand(6, 33)], axis=-1)


@pytest.mark.parametrize("shape", [(7, 53), (20, 53)])
def test_row_knobs_against_numpy(shape):
    """Every configuration of the space (accumulators, rows per chunk, rows taken together,
    reuse, reciprocal); 20 rows: groups of 2 and 4 rows, a last chunk of 16 holding 4 rows."""
    x = rand(*shape) * 3
    phs, outs = lowered("Softmax", [x], {"axis": -1}, [shape])
    space = select.space_for(phs, outs, [None], host_target())
    e = np.exp(x - x.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    configs = all_configs(space)
    assert {k.name for k in space.knobs} >= {"accumulators", "rows_per_chunk", "reuse",
                                              "rows_together"}
    for cfg in configs:
        (got,) = run_kernel(space.build(cfg, "k").kernel, [x])
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, err_msg=str(cfg))


@pytest.mark.parametrize("op", ["Softmax", "LayerNormalization"])
def test_rows_stop_at_the_run_time_dimension(op):
    """Rows and a row's columns that run to a run-time dimension (bound 24): a softmax over
    [2, L, L] (rows 2 x L, the row L long) and a layer norm over [L, 40], a sample of the
    configurations, at lengths 1, 5 and 24, match numpy at the length; values past it in the
    input (NaN) are never read and the output past it is never written (left 0)."""
    bound = 24
    L = te.DynExtent(te.dim_var(0, 1, bound))
    shape = (2, L, L) if op == "Softmax" else (L, 40)
    x = rand(*map(int, shape)) * 3
    ins = [x] if op == "Softmax" else [x, rand(40), rand(40)]
    phs = [te.placeholder(shape if i == 0 else a.shape, "float32", f"in{i}")
           for i, a in enumerate(ins)]
    ctx = OpContext(node="n", op_type=op, attrs={"axis": -1}, inputs=phs,
                    consts=[None] * len(phs), out_shapes=[shape], out_dtypes=["float32"],
                    file=None)
    outs = OPS[op](ctx)
    space = select.space_for(phs, outs, [None] * len(phs), host_target())
    assert space.kind == "rows"
    configs = all_configs(space)
    configs = [configs[i] for i in np.random.default_rng(0).choice(len(configs), 8,
                                                                    replace=False)]
    for length in (1, 5, bound):
        cut = x[:, :length, :length] if op == "Softmax" else x[:length]
        xin = np.full_like(x, np.nan)
        if op == "Softmax":
            xin[:, :length, :length] = cut
            e = np.exp(cut - cut.max(-1, keepdims=True))
            want = e / e.sum(-1, keepdims=True)
        else:
            xin[:length] = cut
            mean = cut.mean(-1, keepdims=True)
            var = ((cut - mean) ** 2).mean(-1, keepdims=True)
            want = (cut - mean) / np.sqrt(var + 1e-5) * ins[1] + ins[2]
        for cfg in configs:
            (got,) = run_kernel(space.build(cfg, "k").kernel, [xin, *ins[1:]], dims=[length])
            part = got[:, :length, :length] if op == "Softmax" else got[:length]
            np.testing.assert_allclose(part, want, rtol=1e-5, atol=1e-5,
                                       err_msg=f"length {length}: {cfg}")
            rest = got.copy()
            if op == "Softmax":
                rest[:, :length, :length] = 0
            else:
                rest[:length] = 0
            assert not rest.any(), f"written past length {length}: {cfg}"


def test_row_kernel_is_one_pass_over_rows():
    shape = (512, 300)
    phs, outs = lowered("Softmax", [rand(*shape)], {"axis": -1}, [shape])
    space = select.space_for(phs, outs, [None], host_target())
    kernel = space.build(space.default_config(), "k").kernel
    assert len(kernel.stages) == 1
    loop = kernel.stages[0]
    assert isinstance(loop, For) and loop.kind == "parallel"
    text = format_kernel(kernel)
    # the output row holds exp(x - max), rescaled in place: one exp per row taken together
    # (2 by default where a reduction's element calls a math function)
    assert text.count("exp(") == space.default_config()["rows_together"] == 2
    # scratch is per chunk of rows, not per element
    assert all(b.size <= shape[0] for b in kernel.buffers if b.role == "scratch")


def test_rows_taken_together_share_column_loops():
    """Four rows per column loop: as many loops as for one row, each row's statistic in its
    own slot, and the same numbers."""
    shape = (8, 96)
    x = rand(*shape) * 3
    phs, outs = lowered("Softmax", [x], {"axis": -1}, [shape])
    space = select.space_for(phs, outs, [None], host_target())
    one, four = ({**space.default_config(), "rows_together": r} for r in (1, 4))
    k1, k4 = space.build(one, "k").kernel, space.build(four, "k").kernel
    assert len(_loops(k4.stages[0], [])) == len(_loops(k1.stages[0], []))
    assert format_kernel(k4).count("exp(") == 4
    assert all(b.shape[0] == 8 for b in k4.buffers if b.role == "scratch")
    (a,) = run_kernel(k1, [x])
    (b,) = run_kernel(k4, [x])
    np.testing.assert_array_equal(a, b)


def test_rows_together_default_leaves_registers_for_math():
    """Softmax's sum calls exp per element, whose constants and temporaries leave registers
    for 2 rows' accumulators: 2 rows by default; layer norm's reductions call nothing: 4."""
    shape = (16, 768)
    x = rand(*shape)
    phs, outs = lowered("Softmax", [x], {"axis": -1}, [shape])
    softmax = select.space_for(phs, outs, [None], host_target())
    scale, bias = rand(768), rand(768)
    phs, outs = lowered("LayerNormalization", [x, scale, bias], {"axis": -1}, [shape])
    norm = select.space_for(phs, outs, [None, scale, bias], host_target())
    assert (softmax.kind, norm.kind) == ("rows", "rows")
    assert softmax.default_config()["rows_together"] == 2
    assert norm.default_config()["rows_together"] == 4


def _loops(stmt, out):
    if isinstance(stmt, For):
        out.append((stmt.var.name, stmt.extent, stmt.kind))
        _loops(stmt.body, out)
    elif isinstance(stmt, Seq):
        for x in stmt.stmts:
            _loops(x, out)
    return out


def test_rows_of_several_dims_run_as_one_column_loop():
    """GlobalAveragePool over 7x7: one vectorised loop of 49 columns, not 7 loops of 7."""
    x = rand(1, 40, 7, 7)
    phs, outs = lowered("GlobalAveragePool", [x], {}, [(1, 40, 1, 1)])
    space = select.space_for(phs, outs, [None], host_target())
    assert space.kind == "rows"
    for cfg in all_configs(space):
        kernel = space.build(cfg, "k").kernel
        vec = [(n, e) for n, e, kind in _loops(kernel.stages[0], []) if kind == "vectorize"]
        assert [e.value for _, e in vec] == [49], cfg
        (got,) = run_kernel(kernel, [x])
        np.testing.assert_allclose(got, x.mean((2, 3), keepdims=True), rtol=1e-5, atol=1e-7,
                                   err_msg=str(cfg))
    check_node("GlobalAveragePool", [x])


def test_rows_keep_their_dims_where_one_loop_would_divide():
    """LayerNormalization over (5, 7) with a scale that broadcasts along the 5: the mean and
    variance run as one loop of 35, the output stage, whose scale index would be a remainder
    of that loop, keeps its two column loops."""
    x, scale, bias = rand(2, 3, 5, 7), rand(7), rand(7)
    phs, outs = lowered("LayerNormalization", [x, scale, bias], {"axis": 2}, [x.shape])
    space = select.space_for(phs, outs, [None] * 3, host_target())
    kernel = space.build(space.default_config(), "k").kernel
    vec = [e.value for _, e, kind in _loops(kernel.stages[0], []) if kind == "vectorize"]
    assert sorted(vec) == [7, 35, 35]
    check_node("LayerNormalization", [x, scale, bias], consts={1, 2}, axis=2)


@pytest.mark.parametrize("op,attrs,shape", [
    ("Softmax", {"axis": 1}, (4, 37, 5)),  # reduces a middle axis: strided rows
    ("ReduceSum", {"keepdims": 0}, (40, 9)),  # over axis 0
])
def test_rows_not_matched(op, attrs, shape):
    x = rand(*shape)
    if op == "ReduceSum":
        axes = np.array([0], dtype=np.int64)
        phs, outs = lowered(op, [x, axes], attrs, [(9,)], consts=[None, axes])
        assert space_kind(phs[:1], outs) == "default"
        check_node(op, [x, axes], consts={1}, **attrs)
    else:
        phs, outs = lowered(op, [x], attrs, [shape])
        assert space_kind(phs, outs) == "default"
        check_node(op, [x], **attrs)


# Depthwise template ------------------------------------------------------------------------

DW_CASES = [
    (3, 7, 9, 3, 1, {"pads": [1, 1, 1, 1]}),
    (4, 10, 13, 3, 1, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    (4, 10, 13, 5, 1, {"pads": [2, 2, 2, 2]}),
    (4, 10, 13, 5, 1, {"pads": [2, 1, 0, 2], "strides": [2, 1]}),
    (5, 9, 20, 3, 1, {}),
    (3, 11, 17, 3, 1, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    (3, 11, 17, 3, 2, {"pads": [1, 1, 1, 1]}),
    (3, 1, 17, 3, 1, {"pads": [1, 1, 1, 1]}),
    (6, 12, 12, 3, 1, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
]


@pytest.mark.parametrize("c,h,w,k,mult,attrs", DW_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_depthwise(c, h, w, k, mult, attrs, bias):
    x = rand(2, c, h, w)
    ins = [x, rand(c * mult, 1, k, k)] + ([rand(c * mult)] if bias else [])
    check_node("Conv", ins, consts={1, 2}, group=c, **attrs)


def _dw_tensors(c=5, h=9, w=21, stride=2, pad=1, relu=False, swish=False):
    x = te.placeholder((1, c, h, w), "float32", "x")
    wt = te.placeholder((c, 1, 3, 3), "float32", "w")
    b = te.placeholder((c,), "float32", "b")
    win = Window((3, 3), (stride, stride), (1, 1), (pad, pad), (pad, pad))
    oh = (h + 2 * pad - 3) // stride + 1
    ow = (w + 2 * pad - 3) // stride + 1
    src = window_source(x, win, (h, w), (oh, ow), 0.0)
    y = conv_compute(src, wt, b, win, (1, c, oh, ow), c)
    if relu:
        y = te.compute(y.shape, lambda *i: te.maximum(y[i], te.const(0.0)), name="relu")
    if swish:
        y = te.compute(y.shape, lambda *i: y[i] * te.Unary("sigmoid", y[i]), name="swish")
    return [x, wt, b], [y]


def _dw_numpy(x, wt, b, stride, pad):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - 3) // stride + 1
    ow = (w + 2 * pad - 3) // stride + 1
    y = np.zeros((n, c, oh, ow), np.float64) + b[None, :, None, None]
    for r0 in range(3):
        for r1 in range(3):
            win = xp[:, :, r0:r0 + stride * oh:stride, r1:r1 + stride * ow:stride]
            y += win * wt[None, :, 0, r0, r1, None, None]
    return y.astype(np.float32)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_knobs_and_epilogue(relu, stride, fitted_target, run_target):
    """Every configuration against numpy; at stride 1 with 16-lane vectors that includes the
    padded-plane form (offered for output rows of a few vectors: 21 columns are 2 of them)."""
    ins, outs = _dw_tensors(stride=stride, relu=relu)
    fitted = select.space_for(ins, outs, [None] * 3, fitted_target)
    assert ("plane" in {k.name for k in fitted.knobs}) == (stride == 1)
    space = select.space_for(ins, outs, [None] * 3, run_target)
    assert space.kind == "depthwise"
    x, wt, b = rand(1, 5, 9, 21), rand(5, 1, 3, 3), rand(5)
    want = _dw_numpy(x, wt, b, stride, 1)
    if relu:
        want = np.maximum(want, 0)
    for cfg in all_configs(space):
        (got,) = run_kernel(space.build(cfg, "k").kernel, [x, wt, b])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(cfg))


@pytest.mark.parametrize("c,h,w,stride,forms", [
    (5, 9, 40, 1, {"rows"}), (5, 21, 21, 2, {"rows"}), (3, 20, 14, 1, {"rows", "padded"}),
    (4, 7, 7, 1, {"rows", "padded", "masked"}), (4, 14, 14, 1, {"rows", "padded", "masked"})])
def test_depthwise_swish_runs_over_each_plane(c, h, w, stride, forms, run_target):
    """A dear epilogue (swish: a sigmoid per element) is not computed inside the window's loops,
    whose scalar borders and remainders would pay it element by element, but by one vector loop
    over each finished plane; every form (rows, padded, masked) against numpy. `forms` are a
    masked-tail target's; without masks every stride-1 plane may also run padded."""
    ins, outs = _dw_tensors(c=c, h=h, w=w, stride=stride, swish=True)
    space = select.space_for(ins, outs, [None] * 3, run_target)
    assert space.kind == "depthwise"
    x, wt, b = rand(1, c, h, w), rand(c, 1, 3, 3), rand(c)
    conv = _dw_numpy(x, wt, b, stride, 1).astype(np.float64)
    want = conv / (1 + np.exp(-conv))
    seen = set()
    for cfg in all_configs(space):
        seen.add(cfg.get("plane", "rows"))
        kernel = space.build(cfg, "k").kernel
        loops = _loops_around_sigmoids(Seq(kernel.stages), [])
        assert loops and all(inner.kind == "vectorize" and inner.extent.value == outs[0].shape[2]
                             * outs[0].shape[3] for inner in loops), cfg
        # the plane's last partial vector under a mask where masks are cheap (AVX-512)
        assert all(inner.masked_tail == run_target.masked_vectors for inner in loops), cfg
        (got,) = run_kernel(kernel, [x, wt, b], target=run_target)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=str(cfg))
    if stride == 1 and not run_target.masked_vectors:
        forms = forms | {"padded"}
    assert seen == forms


def _loops_around_sigmoids(s, loops) -> list:
    """The innermost loop around each store that computes a sigmoid."""
    if isinstance(s, For):
        return _loops_around_sigmoids(s.body, [*loops, s])
    if isinstance(s, Seq):
        return [x for st in s.stmts for x in _loops_around_sigmoids(st, loops)]
    return [loops[-1]] if "sigmoid(" in repr(s) else []


def _stores_with_select(s) -> list:
    if isinstance(s, For):
        return _stores_with_select(s.body)
    if isinstance(s, Seq):
        return [x for st in s.stmts for x in _stores_with_select(st)]
    return [s] if "select(" in repr(s) else []


@pytest.mark.parametrize("target_name", ["cpu-avx512", "cpu-avx2"])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_row_interior_ends_under_a_mask_where_masks_are_cheap(stride, target_name):
    """The row form's interior run (a 112-wide row at stride 1: 110 outputs, 6 vectors and
    14 left over) ends with a masked vector where masks are cheap: as a scalar remainder of
    nine taps each, it cost more than the vectors (the layer 0.81x, a 144-channel 56x56 one
    0.72x of the time on a Zen 4 core). Strided rows keep their scalar remainder: LLVM turns
    masked strided loads into gathers (3x3/2 at 112: 11x slower)."""
    target = NAMED_TARGETS[target_name]
    ins, outs = _dw_tensors(c=4, h=20, w=112, stride=stride)
    space = select.space_for(ins, outs, [None] * 3, target)
    cfg = {**space.default_config(), "plane": "rows"} if any(
        k.name == "plane" for k in space.knobs) else space.default_config()
    loops = [st for st in loop_ir.walk(Seq(space.build(cfg, "k").kernel.stages))
             if isinstance(st, For) and st.kind == "vectorize"]
    assert loops
    masked = target.masked_vectors and stride == 1
    assert all(lp.masked_tail == masked for lp in loops)


def test_depthwise_reads_input_without_conditions():
    """No padded copy (one stage, the input read directly) and no select anywhere: the border
    runs drop their out-of-bounds taps at compile time."""
    ins, outs = _dw_tensors(h=20, w=33, stride=1, pad=1)
    space = select.space_for(ins, outs, [None] * 3, host_target())
    kernel: Kernel = space.build(space.default_config(), "k").kernel
    assert len(kernel.stages) == 1
    assert not [b for b in kernel.buffers if b.role == "scratch"]
    text = format_kernel(kernel)
    assert "select(" not in text and "vectorize" in text
    assert not _stores_with_select(kernel.stages[0])


def test_depthwise_padded_plane_form():
    """The padded-plane form (stride 1): the window is one vector loop over the plane in the
    padded pitch ((7-1)*9 + 7 = 61 positions for 7x7 outputs of a 9x9 input), every tap a
    plain load at the loop index plus a constant (no select, no condition); rows of 7 would
    be a loop per row and run of it."""
    ins, outs = _dw_tensors(c=24, h=9, w=9, stride=1, pad=0, relu=True)
    space = select.space_for(ins, outs, [None] * 3, host_target())
    names = [k.options for k in space.knobs if k.name == "plane"]
    assert names == [("rows", "padded")]  # 9x9 in, 7x7 out: rows of two pitches, no masks
    cfg = {**space.default_config(), "plane": "padded"}
    kernel = space.build(cfg, "k").kernel
    chunk = kernel.stages[0]
    assert isinstance(chunk, For) and isinstance(chunk.body, For)
    window = [lp for lp in _loops(chunk, []) if lp[0] == "v"]
    assert len(window) == 1 and window[0][1].value == 61 and window[0][2] == "vectorize"
    window_loop = next(st for st in chunk.body.body.stmts
                       if isinstance(st, For) and st.var.name == "v")
    assert "select(" not in repr(window_loop.body)
    x, wt, b = rand(1, 24, 9, 9), rand(24, 1, 3, 3), rand(24)
    (got,) = run_kernel(kernel, [x, wt, b])
    np.testing.assert_allclose(got, np.maximum(_dw_numpy(x, wt, b, 1, 0), 0), rtol=1e-5,
                               atol=1e-5)


def test_depthwise_small_same_planes_run_as_one_masked_loop():
    """MobileNetV2's 7x7 depthwise layers ('same' padding, stride 1): the cost model picks the
    masked-plane form, one vector loop of 49 outputs per plane whose taps load at the loop
    index plus a constant under a mask, for every plane but the first and the last (whose
    out-of-plane taps would leave the buffer: they run in the row form)."""
    from lowering.search.tuner import Tuner

    ins, outs = _dw_tensors(c=24, h=7, w=7, stride=1, pad=1, relu=True)
    space = select.space_for(ins, outs, [None] * 3, host_target())
    cfg = Tuner().choose(space)
    assert cfg["plane"] == "masked"
    assert space.cost(cfg) < min(space.cost({**cfg, "plane": f}) for f in ("rows", "padded"))
    kernel = space.build(cfg, "k").kernel
    first, planes, last = kernel.stages
    assert isinstance(planes, For) and (planes.start.value, planes.extent.value) == (1, 23)
    (window,) = [lp for lp in _loops(planes, []) if lp[0] == "v"]
    assert window[1].value == 49 and window[2] == "vectorize"
    assert not [lp for lp in _loops(first, []) + _loops(last, []) if lp[0] == "v"]
    x, wt, b = rand(1, 24, 7, 7), rand(24, 1, 3, 3), rand(24)
    (got,) = run_kernel(kernel, [x, wt, b])
    np.testing.assert_allclose(got, np.maximum(_dw_numpy(x, wt, b, 1, 1), 0), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("target_name,lanes", [("cpu-avx2", 8), ("cpu-avx512", 16)])
def test_masked_plane_loop_is_unrolled_whatever_its_size(target_name, lanes):
    """The masked-plane loop's row and column masks are constants only once the vector loop is
    unrolled fully, which LLVM's size threshold refused for a 14x14 plane (25 vectors of 9 taps
    on AVX2, 13 on AVX-512: masks computed per vector from v // 14 and v % 14, 1.3-2x the time
    of the padded form). The loop asks for the full unroll: the optimised code holds a vector
    product for every tap of every whole vector of the plane (17 on AVX2 without the request,
    where 216 are due)."""
    from lowering.search.tuner import Tuner
    from targets.cpu.codegen import ModuleBuilder, optimized_module


    target = NAMED_TARGETS[target_name]
    ins, outs = _dw_tensors(c=24, h=14, w=14, stride=1, pad=1, relu=True)
    space = select.space_for(ins, outs, [None] * 3, target)
    cfg = {**Tuner().choose(space), "plane": "masked"}
    kernel = space.build(cfg, "k").kernel
    (window,) = [lp for lp in _loops(kernel.stages[1], []) if lp[0] == "v"]
    assert window[2] == "vectorize"
    mb = ModuleBuilder(target)
    mb.add_kernel(kernel)
    assert "llvm.loop.unroll.full" in mb.text()
    ir = str(optimized_module(mb.text(), target))
    products = ir.count(f"fmul contract <{lanes} x float>")  # each fused with its add later
    assert products >= 196 // lanes * 9, products


@pytest.mark.parametrize("cols,kept", [(49, True), (128, False)])
def test_short_row_reductions_stay_loops_for_the_vectorizer(cols, kept):
    """LLVM fully unrolls a 49-column reduction before its loop vectorizer sees it, leaving it
    scalar (then gathers across rows): such short reductions carry llvm.loop.unroll.disable."""
    from targets.cpu.codegen import ModuleBuilder


    x = rand(3, cols)
    phs, outs = lowered("ReduceMean", [x, np.array([-1], np.int64)], {"keepdims": 1},
                        [(3, 1)], consts=[None, np.array([-1], np.int64)])
    space = select.space_for(phs[:1], outs, [None], NAMED_TARGETS["cpu-avx512"])
    assert space.kind == "rows"
    mb = ModuleBuilder(NAMED_TARGETS["cpu-avx512"])
    mb.add_kernel(space.build(space.default_config(), "k").kernel)
    assert ("llvm.loop.unroll.disable" in mb.text()) == kept



def test_max_pool_combines_taps_as_a_tree():
    """The 3x3 window's maxima combine pairwise (10 leaves with the initial value: 4 levels,
    not a chain of 9), and give bit for bit what the default schedule's chain gives, NaNs
    (ignored unless the whole window is NaN), signed zeros and infinities included."""
    from lowering.search.default_space import DefaultSpace

    shape, out = (1, 3, 12, 100), (1, 3, 6, 50)
    x = rand(*shape)
    x[0, 0, 2:6, 10:20] = np.nan  # whole windows of NaN and partly NaN ones
    x[0, 1] = -0.0  # windows of -0 only, and windows that see a +0 too
    x[0, 1, 6:, ::5] = 0.0
    x[0, 2, ::2, ::2] = -np.inf
    x[0, 2, 5, 40:60] = np.inf
    phs, outs = lowered("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                         "strides": [2, 2]}, [out])
    space = select.space_for(phs, outs, [None], host_target())
    assert space.kind == "depthwise"
    default = DefaultSpace(phs, outs, [None], host_target())
    (want,) = run_kernel(default.build(default.default_config(), "d").kernel, [x])
    # an all-NaN window keeps the initial -inf; -0 below +0
    assert np.isneginf(want[0, 0]).any() and (np.signbit(want) & (want == 0)).any()
    assert (~np.signbit(want[0, 1]) & (want[0, 1] == 0)).any()
    for cfg in all_configs(space):
        (got,) = run_kernel(space.build(cfg, "k").kernel, [x])
        np.testing.assert_array_equal(got, want, err_msg=str(cfg))
        assert np.array_equal(np.signbit(got), np.signbit(want)), cfg
    text = format_kernel(space.build(space.default_config(), "k").kernel)
    assert "max(max(max(max(" in text and "max(max(max(max(max(" not in text


def _pool_out(shape, attrs):
    """The output shape of a 2-D pool (explicit pads, ceil_mode)."""
    k, st, pads = attrs["kernel_shape"], attrs["strides"], attrs.get("pads", [0, 0, 0, 0])
    rnd = math.ceil if attrs.get("ceil_mode") else math.floor
    return shape[:2] + tuple(int(rnd((shape[2 + i] + pads[i] + pads[i + 2] - k[i]) / st[i])) + 1
                             for i in range(2))


NARROW_POOLS = [
    ((1, 6, 32, 32), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), "split"),
    # odd widths: a column left over per input row; batch 2
    ((2, 3, 23, 21), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), "split"),
    ((1, 4, 15, 17), dict(kernel_shape=[3, 2], pads=[0, 1, 2, 0], strides=[3, 2], ceil_mode=1),
     "split"),
    ((1, 5, 16, 20), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]), "split"),
    ((1, 5, 32, 32), dict(kernel_shape=[2, 2], strides=[2, 2]), "row_vectors"),
    ((2, 3, 9, 17), dict(kernel_shape=[2, 2], strides=[1, 1]), "row_vectors"),
]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("shape,attrs,form", NARROW_POOLS)
def test_narrow_pools_give_the_default_schedules_values(op, shape, attrs, form, run_target):
    """Pools narrower than POOL_MIN_WIDTH take the template in one form: rows of whole
    vectors where every column sees every column tap as a plain load (no padding; unit
    stride, or a 2x2/2 window's two adjacent columns), else the planes split by stride phase.
    Either gives bit for bit what the default schedule gives, infinities, signed zeros and
    whole windows of NaN included (a NaN's own sign aside)."""
    from lowering.search.default_space import DefaultSpace

    x = rand(*shape)
    x.reshape(-1)[::7] = np.nan
    x.reshape(-1)[3::11] = -0.0
    x.reshape(-1)[5::13] = 0.0
    x.reshape(-1)[1::17] = -np.inf
    x.reshape(-1)[2::19] = np.inf
    x[0, 0, :4] = np.nan  # whole windows of NaN
    phs, outs = lowered(op, [x], attrs, [_pool_out(shape, attrs)])
    space = select.space_for(phs, outs, [None], run_target)
    assert space.kind == "depthwise"
    assert [k.options for k in space.knobs if k.name == "plane"] == [(form,)]
    default = DefaultSpace(phs, outs, [None], run_target)
    (want,) = run_kernel(default.build(default.default_config(), "d").kernel, [x],
                         target=run_target)
    for cfg in all_configs(space):
        (got,) = run_kernel(space.build(cfg, "k").kernel, [x], target=run_target)
        np.testing.assert_array_equal(got, want, err_msg=str(cfg))
        numbers = ~np.isnan(want)
        assert np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers])), cfg


def test_narrow_strided_pool_splits_its_planes_by_phase():
    """A 3x3/2 max pool over 32x32 planes (ResNet-style stem pool on a small image): each
    plane is copied into its four stride phases (17x17 each, the identity around them), and
    the window is ONE vector loop per plane, a whole number of 16-lane vectors with every tap
    a plain load of a phase at the loop index plus a constant: no select, no stride, no
    gather, and LLVM vectorises it at 16 lanes. (In rows, the left tap's mask and the gap in
    its stride-2 group left LLVM 8 lanes and scalar remainders: 3x slower.)"""
    from targets.cpu.codegen import ModuleBuilder, optimize_and_emit


    target = NAMED_TARGETS["cpu-avx512"]
    shape, attrs = (1, 16, 32, 32), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                         strides=[2, 2])
    phs, outs = lowered("MaxPool", [rand(*shape)], attrs, [_pool_out(shape, attrs)])
    space = select.space_for(phs, outs, [None], target)
    kernel = space.build(space.default_config(), "k").kernel
    (chunk,) = kernel.stages
    window = [lp for lp in _loops(chunk, []) if lp[0] == "v"]
    assert len(window) == 1 and window[0][1].value % 16 == 0 and window[0][2] == "vectorize"
    assert window[0][1].value >= 15 * 17 + 16
    assert "select(" not in format_kernel(kernel)
    scratch = [b for b in kernel.buffers if b.role == "scratch"]
    assert scratch[0].size >= 4 * 17 * 17
    mb = ModuleBuilder(target)
    mb.add_kernel(kernel)
    _, ir = optimize_and_emit(mb.text(), target)
    assert "<16 x float>" in ir and "gather" not in ir


@pytest.mark.parametrize("cores,planes,kind", [(2, 16, "parallel"), (1, 16, "serial"),
                                               (2, 2, "serial")])
def test_narrow_pools_share_their_planes_from_a_time_worth_it(cores, planes, kind):
    """A narrow pool's loop over chunks of planes runs in parallel when its estimated time
    (maxima counted at MAX_CYCLES each) is worth sharing among the machine's cores
    (cost_model.worth_parallel), though its taps are fewer than PARALLEL_MIN_WORK: a 3x3/2
    max pool of 16 32x32 planes (4096 outputs, ~5 us on a Zen 4 core) on two cores; on one
    core, or with two planes (one chunk), serial."""
    zen4 = NAMED_TARGETS["zen4"]
    target = zen4.with_machine(zen4.machine.with_cores(cores))
    shape, attrs = (1, planes, 32, 32), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                             strides=[2, 2])
    phs, outs = lowered("MaxPool", [rand(*shape)], attrs, [_pool_out(shape, attrs)])
    space = select.space_for(phs, outs, [None], target)
    assert space.default_config()["plane"] == "split"
    (chunk,) = space.build(space.default_config(), "k").kernel.stages
    assert chunk.kind == kind


@pytest.mark.parametrize("hw,pad,form", [(7, 1, "masked"), (14, 1, "masked"),
                                         (28, 1, "padded")])
def test_depthwise_plane_forms_with_a_fused_residual_against_onnxruntime(hw, pad, form,
                                                                          fitted_target):
    """Depthwise convolution + residual Add + Clip, fused into one kernel, at sizes where the
    cost model picks the masked plane (7x7, 14x14 'same') or the padded plane (28x28, too
    large to mask) for 16-lane vectors: the epilogue reads the residual at the output's own
    index through either form (the run takes the host's pick: the same forms on an AVX-512
    host)."""
    from onnx import TensorProto, helper, numpy_helper
    from program_runner import check_model

    c, oh = 12, hw + 2 * pad - 2
    w, b = rand(c, 1, 3, 3), rand(c)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, pads=[pad] * 4),
             helper.make_node("Add", ["y", "r"], ["s"]),
             helper.make_node("Clip", ["s", "lo", "hi"], ["z"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, c, oh, oh])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, oh, oh])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
         numpy_helper.from_array(np.array(1.5, np.float32), "hi")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    ins, outs = _dw_tensors(c=c, h=hw, w=hw, stride=1, pad=pad, relu=True)
    space = select.space_for(ins, outs, [None] * 3, fitted_target)
    from lowering.search.tuner import Tuner
    assert Tuner().choose(space)["plane"] == form
    check_model(model, [rand(1, c, hw, hw), rand(1, c, oh, oh)])


@pytest.mark.parametrize("name,offered,chosen", [("cpu-avx512", False, False),
                                                 ("cpu-avx2", True, True),
                                                 ("aarch64", True, False)])
def test_wide_depthwise_planes_run_padded_where_tails_are_scalar(name, offered, chosen):
    """MobileNetV2's 112-wide 3x3 depthwise layer: with masked tails (AVX-512) the row form is
    the only stride-1 form for rows this wide; without them (AVX2, NEON) the padded plane is
    offered, and where the row form's scalar remainders outweigh the plane's copies (8 lanes,
    two loads a cycle) the cost model picks it (on NEON the two are within its margin)."""
    from lowering.search.tuner import Tuner

    ins, outs = _dw_tensors(c=32, h=112, w=112, stride=1)
    space = select.space_for(ins, outs, [None] * 3, NAMED_TARGETS[name])
    assert ("padded" in dict((k.name, k.options) for k in space.knobs).get("plane", ())) \
        == offered
    assert (Tuner().choose(space).get("plane") == "padded") == chosen


def test_a_float_window_sums_its_taps_in_independent_chains():
    """A 3x3 window's nine products run as two FMA chains (five taps seeded with the initial
    value, then four), added at the end: six dependent adds instead of nine, and no more of
    them; 5x5 takes five chains of five, eight dependent adds instead of 25."""
    from lowering.templates.depthwise import chained_sum

    def depth(e):
        kids = te.children(e)
        return 1 + max(depth(k) for k in kids) if isinstance(e, te.Binary) and \
            e.op == "add" else 0

    def adds(e):
        own = isinstance(e, te.Binary) and e.op == "add"
        return own + sum(adds(k) for k in te.children(e))

    x, w = te.placeholder((25,), "float32", "x"), te.placeholder((25,), "float32", "w")
    init = te.Load(w, [te.Const(0, "int64")])
    for taps, want_depth in ((9, 6), (25, 8)):
        products = [te.Load(x, [te.Const(i, "int64")]) * te.Load(w, [te.Const(i, "int64")])
                    for i in range(taps)]
        total = chained_sum(init, products)
        assert adds(total) == taps  # the single chain's count: init + taps - 1 products
        assert depth(total) == want_depth
