"""Data-movement operators against onnxruntime, float and int64 (shape tensors) data alike.

Views (Reshape/Flatten/Squeeze/Unsqueeze), Transpose, Concat, Split, Slice, Gather, Expand,
Tile, ArgMax/ArgMin. Shape/Size/ConstantOfShape/Range are folded by the frontend, so their
definitions are also run directly through the kernel harness.
"""

import pathlib
import sys

import numpy as np
import pytest
from onnx import numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from kernel_harness import run_te  # noqa: E402
from program_runner import check_node as run_node  # noqa: E402
from program_runner import run_program  # noqa: E402

from lowering import te  # noqa: E402
from lowering.ops import OPS, OpContext  # noqa: E402

RNG = np.random.default_rng(2)
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def rand(*shape, dtype=np.float32):
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-1000, 1000, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def i64(*v):
    return np.asarray(v, dtype=np.int64)


DTYPES = [np.float32, np.int64]


# views ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_shape,shape,allowzero", [
    ((2, 3, 4), (6, 4), 0),
    ((2, 3, 4), (0, -1), 0),       # 0 copies the input dim
    ((2, 3, 4), (-1,), 0),
    ((2, 3, 4), (4, 0, 2), 0),
    ((6,), (1, 2, 1, 3), 1),
])
def test_reshape(dtype, in_shape, shape, allowzero):
    run_node("Reshape", [rand(*in_shape, dtype=dtype), i64(*shape)], consts={1},
             allowzero=allowzero)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis):
    run_node("Flatten", [rand(2, 3, 4)], axis=axis)


@pytest.mark.parametrize("in_shape,axes", [((1, 3, 1, 4), (0, -2)), ((1, 3, 1), None)])
def test_squeeze(in_shape, axes):
    run_node("Squeeze", [rand(*in_shape, dtype=np.int64), None if axes is None else i64(*axes)],
             consts={1})


@pytest.mark.parametrize("axes", [(0,), (-1,), (1, 3)])
def test_unsqueeze(axes):
    run_node("Unsqueeze", [rand(3, 4), i64(*axes)], consts={1})


@pytest.mark.parametrize("op, x, given, other, declared", [
    ("Reshape", (2, 3, 4), (6, 4), (4, 6), (6, 4)),
    ("Unsqueeze", (1, 3, 1, 5), (-2,), (0,), (1, 3, 1, 1, 5)),
    ("Squeeze", (1, 3, 1, 5), (0,), (2,), (3, 1, 5)),
])
def test_view_with_a_runtime_shape_is_checked(tmp_path, op, x, given, other, declared):
    """The shape (axes) input decides the output's shape: given at run time, it could ask for
    another shape than the declared one, so the compiled view checks it (pinned.py): a value
    that asks for another shape stops the run instead of being taken on trust."""
    from onnx import TensorProto, helper
    from program_runner import RunFailed

    from aotc.driver import compile_file

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node(op, ["x", "s"], ["y"], name="view")], "g",
                          [vi("x", TensorProto.FLOAT, x), vi("s", TensorProto.INT64, [len(given)])],
                          [vi("y", TensorProto.FLOAT, declared)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "view.onnx"
    path.write_bytes(model.SerializeToString())
    program, _ = compile_file(path, input_shapes=[])
    data = rand(*x)
    np.testing.assert_array_equal(run_program(program, [data, i64(*given)])[0],
                                  data.reshape(declared))
    with pytest.raises(RunFailed):
        run_program(program, [data, i64(*other)])


def test_reshape_of_constant():
    """A view of an initializer that is a graph output is copied out of the weights."""
    run_node("Reshape", [rand(4, 6), i64(3, 8)], consts={0, 1})


# transpose --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [*DTYPES, np.bool_])
@pytest.mark.parametrize("shape,perm", [
    ((3, 5), None),
    ((2, 3, 4), None),
    ((2, 3, 4, 5), (0, 2, 1, 3)),
    ((2, 3, 4, 5), (0, 3, 1, 2)),
    ((33, 17), (1, 0)),
])
def test_transpose(dtype, shape, perm):
    attrs = {} if perm is None else {"perm": list(perm)}
    run_node("Transpose", [rand(*shape, dtype=dtype)], **attrs)


# concat / split ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,axis", [
    ([(2, 3), (4, 3)], 0),
    ([(2, 3), (2, 1), (2, 5)], -1),
    ([(2, 1, 4), (2, 3, 4), (2, 2, 4), (2, 1, 4), (2, 5, 4)], 1),
    ([(3,)], 0),
])
def test_concat(dtype, shapes, axis):
    run_node("Concat", [rand(*s, dtype=dtype) for s in shapes], axis=axis)


def test_concat_shape_vectors():
    """int64 shape vectors, one of them an initializer."""
    run_node("Concat", [i64(2, 3), i64(-1), i64(7, 1)], consts={1}, axis=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis,split,n_out,num_outputs", [
    ((6, 4), 0, (2, 4), 2, None),
    ((3, 10), -1, (1, 6, 3), 3, None),
    ((4, 6, 2), 1, None, 3, 3),        # even split by num_outputs
    ((4, 7, 2), 1, None, 3, 3),        # uneven: 3, 3, 1
    ((5, 3), 0, None, 2, 2),           # uneven: 3, 2
])
def test_split(dtype, shape, axis, split, n_out, num_outputs):
    attrs = {"axis": axis}
    if num_outputs is not None:
        attrs["num_outputs"] = num_outputs
    run_node("Split", [rand(*shape, dtype=dtype), None if split is None else i64(*split)],
             consts={1}, n_out=n_out, **attrs)


def test_split_opset13_equal():
    """Opset 13: no num_outputs; an equal split into as many parts as outputs."""
    run_node("Split", [rand(6, 4)], n_out=3, opset=13, axis=0)


# slice ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,starts,ends,axes,steps", [
    ((10,), (2,), (7,), None, None),
    ((5, 6), (1, -4), (I64_MAX, -1), None, None),          # INT64_MAX end, negative indices
    ((5, 6), (-1,), (I64_MIN,), (1,), (-1,)),               # reverse a whole axis
    ((5, 6, 7), (4, 0), (0, 7), (0, 2), (-2, 3)),           # negative and >1 steps
    ((5, 6), (-100,), (100,), (-2,), (2,)),                  # clamping both ends
    ((4, 6), (10,), (-10,), (1,), (-3,)),                    # clamped start, negative step
    ((4, 6), (3,), (3,), (0,), (1,)),                        # empty slice
])
def test_slice(dtype, shape, starts, ends, axes, steps):
    inputs = [rand(*shape, dtype=dtype), i64(*starts), i64(*ends),
              None if axes is None else i64(*axes), None if steps is None else i64(*steps)]
    run_node("Slice", inputs, consts={1, 2, 3, 4})


# gather -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis,indices", [
    ((5, 4), 0, [[0, 4], [-1, 2]]),
    ((3, 5, 2), 1, [1, -5, 4]),
    ((3, 5, 2), -1, [[1], [0]]),
    ((6, 3), 0, 2),                   # scalar index drops the axis
    ((4,), 0, [-1, -4, 0]),
])
def test_gather(dtype, shape, axis, indices):
    run_node("Gather", [rand(*shape, dtype=dtype), np.asarray(indices, dtype=np.int64)],
             axis=axis)


def test_gather_int32_indices_constant():
    run_node("Gather", [rand(10, 8), np.asarray([3, 9, -2], dtype=np.int32)], consts={1})


def test_gather_out_of_range_is_clamped():
    """onnxruntime rejects out-of-range indices; aotc must not read outside the data."""
    data = te.placeholder((5, 3), "float32", "d")
    idx = te.placeholder((4,), "int64", "i")
    ctx = OpContext("n", "Gather", {"axis": 0}, [data, idx], [None, None], [(4, 3)],
                    ["float32"])
    (out,) = OPS["Gather"](ctx)
    a = rand(5, 3)
    got = run_te([data, idx], [out], [a, i64(100, -100, -1, 2)])[0]
    np.testing.assert_array_equal(got, a[[4, 0, 4, 2]])


# expand / tile ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target", [
    ((3, 1), (2, 3, 4)),
    ((3, 4), (1,)),
    ((1,), (5,)),
    ((2, 1, 3), (2, 4, 1)),
])
def test_expand(dtype, shape, target):
    run_node("Expand", [rand(*shape, dtype=dtype), i64(*target)], consts={1})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,repeats", [((2, 3), (2, 3)), ((3,), (4,)), ((2, 1, 3), (1, 5, 1))])
def test_tile(dtype, shape, repeats):
    run_node("Tile", [rand(*shape, dtype=dtype), i64(*repeats)], consts={1})


# argmax / argmin --------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (1, 1, 1)])
def test_arg_extreme(op, axis, keepdims, last):
    x = RNG.integers(0, 4, size=(3, 6, 5)).astype(np.float32)  # many ties
    run_node(op, [x], axis=axis, keepdims=keepdims, select_last_index=last)


@pytest.mark.parametrize("last", [0, 1])
def test_argmax_nan_row_stays_in_range(last):
    x = te.placeholder((2, 5), "float32", "x")
    ctx = OpContext("n", "ArgMax", {"axis": 1, "select_last_index": last}, [x], [None],
                    [(2, 1)], ["int64"])
    (out,) = OPS["ArgMax"](ctx)
    a = np.full((2, 5), np.nan, np.float32)
    a[1] = [1, 3, 3, 0, 2]
    got = run_te([x], [out], [a])[0]
    assert 0 <= got[0, 0] < 5 and got[1, 0] == (2 if last else 1)


def test_argmax_int64():
    run_node("ArgMax", [rand(4, 9, dtype=np.int64)], axis=1)


# shape queries: folded by the frontend, so also checked directly ---------------------------------

def direct(op, arrays, consts, attrs, out_shape, out_dtype):
    phs = [te.placeholder(a.shape, str(a.dtype), f"in{k}") for k, a in enumerate(arrays)]
    ctx = OpContext("n", op, attrs, phs, consts, [out_shape], [out_dtype])
    (out,) = OPS[op](ctx)
    assert out.shape == tuple(out_shape) and out.dtype == out_dtype
    return run_te(phs, [out], arrays)[0]


@pytest.mark.parametrize("start,end,want", [
    (None, None, [2, 3, 4, 5]), (1, None, [3, 4, 5]), (-3, -1, [3, 4]), (-10, 10, [2, 3, 4, 5]),
    (3, 1, []),
])
def test_shape_direct(start, end, want):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    got = direct("Shape", [rand(2, 3, 4, 5)], [None], attrs, (len(want),), "int64")
    np.testing.assert_array_equal(got, want)


def test_size_direct():
    assert direct("Size", [rand(2, 3, 4)], [None], {}, (), "int64") == 24


@pytest.mark.parametrize("value,dtype", [(None, "float32"), (np.asarray([7], np.int64), "int64"),
                                         (np.asarray([2.5], np.float32), "float32")])
def test_constant_of_shape_direct(value, dtype):
    attrs = {} if value is None else {"value": value}
    got = direct("ConstantOfShape", [i64(2, 3)], [i64(2, 3)], attrs, (2, 3), dtype)
    want = np.full((2, 3), 0 if value is None else value[0])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 5, 1, np.int64), (10, 1, -3, np.int64), (1.0, 2.0, 0.25, np.float32),
    (0.5, -1.0, -0.3, np.float32), (5, 5, 1, np.int32),
])
def test_range_direct(start, limit, delta, dtype):
    arrays = [np.asarray(v, dtype=dtype) for v in (start, limit, delta)]
    want = np.arange(start, limit, delta, dtype=dtype)
    got = direct("Range", arrays, arrays, {}, want.shape, str(np.dtype(dtype)))
    np.testing.assert_allclose(got, want, rtol=1e-6)


# The frontend folds these into a Constant node that is the graph output; compiling that needs
# the Constant operator or a pass that makes it an initializer (neither is in this suite's scope).
FOLDED_OUTPUT = pytest.mark.xfail(reason="graph output folded to a Constant node", strict=False)


@pytest.mark.parametrize("op,inputs,consts,attrs", [
    pytest.param("Shape", [rand(2, 3, 4)], (), {"start": 1}, marks=FOLDED_OUTPUT),
    pytest.param("Size", [rand(2, 3)], (), {}, marks=FOLDED_OUTPUT),
    ("ConstantOfShape", [i64(3, 2)], {0},
     {"value": numpy_helper.from_array(np.asarray([4], np.int64))}),
    ("Range", [np.asarray(1, np.int64), np.asarray(9, np.int64), np.asarray(2, np.int64)],
     {0, 1, 2}, {}),
])
def test_shape_ops_pipeline(op, inputs, consts, attrs):
    run_node(op, inputs, consts=consts, **attrs)


# gather_elements / gather_nd --------------------------------------------------------------------

def positions(n, *shape, dtype=np.int64):
    """Random valid indices into an axis of length n, negative ones included."""
    return RNG.integers(-n, n, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shape,axis,ishape", [
    ((3, 1, 5), 2, (3, 1, 7)),     # the axis may be longer in indices
    ((3, 1, 5), -3, (2, 1, 4)),    # and the other axes shorter
    ((4, 3), 1, (4, 3)),
    ((7,), 0, (9,)),
])
def test_gather_elements(dtype, shape, axis, ishape):
    run_node("GatherElements", [rand(*shape, dtype=dtype), positions(shape[axis], *ishape)],
             axis=axis)


def test_gather_elements_int32_constant_indices():
    run_node("GatherElements", [rand(5, 3), positions(5, 2, 3, dtype=np.int32)], consts={1})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shape,ishape,batch_dims", [
    ((5, 3), (4, 2), 0),           # whole elements
    ((5, 1, 3), (2, 3, 1), 0),     # slices of rank 2
    ((2, 5, 3), (2, 1), 1),        # one batch axis
    ((2, 3, 5, 4), (2, 3, 7, 1), 2),
    ((7,), (3, 1), 0),
])
def test_gather_nd(dtype, shape, ishape, batch_dims):
    k = ishape[-1]
    idx = np.stack([positions(shape[batch_dims + m], *ishape[:-1]) for m in range(k)], -1)
    run_node("GatherND", [rand(*shape, dtype=dtype), idx], batch_dims=batch_dims)


def test_gather_nd_constant_indices():
    idx = i64([0, -1], [2, 1], [-3, 0])
    run_node("GatherND", [rand(3, 2, 4), idx], consts={1})


@pytest.mark.parametrize("op,attrs,ishape,indices,want", [
    ("GatherElements", {"axis": 0}, (4,), [9, -9, -1, 1], lambda a: a[[4, 0, 4, 1]]),
    ("GatherND", {}, (4, 1), [[9], [-9], [-1], [1]], lambda a: a[[4, 0, 4, 1]]),
])
def test_gather_elements_nd_out_of_range_is_clamped(op, attrs, ishape, indices, want):
    """onnxruntime rejects out-of-range indices; aotc must not read outside the data."""
    data = te.placeholder((5,), "float32", "d")
    idx = te.placeholder(ishape, "int64", "i")
    ctx = OpContext("n", op, attrs, [data, idx], [None, None], [(4,)], ["float32"])
    (out,) = OPS[op](ctx)
    a = rand(5)
    got = run_te([data, idx], [out], [a, np.asarray(indices, dtype=np.int64)])[0]
    np.testing.assert_array_equal(got, want(a))


@pytest.mark.parametrize("op,attrs,ishape,match", [
    ("GatherElements", {"axis": 0}, (3, 4), "exceed data"),
    ("GatherElements", {"axis": 2}, (5, 3), "out of range"),
    ("GatherND", {}, (2, 3), "cannot address"),
    ("GatherND", {"batch_dims": 1}, (4, 1), "batch axes differ"),
])
def test_gather_elements_nd_bad_forms_are_refused(op, attrs, ishape, match):
    from aotc.errors import AotcError

    data = te.placeholder((5, 3), "float32", "d")
    idx = te.placeholder(ishape, "int64", "i")
    ctx = OpContext("n", op, attrs, [data, idx], [None, None], [(1,)], ["float32"])
    with pytest.raises(AotcError, match=match):
        OPS[op](ctx)


# trilu ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_])
@pytest.mark.parametrize("upper", [1, 0])
@pytest.mark.parametrize("shape,k", [
    ((4, 7), None),
    ((2, 1, 5, 3), 1),
    ((5, 5), -2),
    ((3, 6), 9),        # past the last diagonal: all zero (upper) or all kept (lower)
    ((1, 6), -3),
])
def test_trilu(dtype, upper, shape, k):
    run_node("Trilu", [rand(*shape, dtype=dtype), None if k is None else np.int64(k)], consts={1},
             upper=upper)


# one_hot ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("itype,dtype,vtype", [
    (np.int64, np.int64, np.int64),
    (np.int64, np.float32, np.float32),
    (np.int32, np.float32, np.float32),
    (np.float32, np.float32, np.float32),   # float indices truncate toward zero
    (np.int64, np.float32, np.int32),
])
@pytest.mark.parametrize("ishape,axis", [((3, 1, 5), -1), ((3, 1, 5), 1), ((7,), 0), ((2, 3), -3)])
def test_one_hot(itype, dtype, vtype, ishape, axis):
    depth = 6
    idx = RNG.integers(-depth - 2, depth + 2, size=ishape)  # out-of-range ones: a row of `off`
    idx = (idx + RNG.uniform(-0.9, 0.9, size=ishape)).astype(itype) if itype == np.float32 \
        else idx.astype(itype)
    run_node("OneHot", [idx, np.asarray(depth, dtype=dtype), np.asarray([-2, 5], dtype=vtype)],
             consts={1}, axis=axis)


def test_one_hot_constant_values_and_runtime_depth():
    run_node("OneHot", [positions(4, 2, 5), np.asarray([4], dtype=np.int64),
                        np.asarray([0.0, 1.0], dtype=np.float32)], consts={1, 2})
    from aotc.errors import AotcError

    idx, depth = te.placeholder((3,), "int64", "i"), te.placeholder((), "int64", "d")
    values = te.placeholder((2,), "float32", "v")
    ctx = OpContext("n", "OneHot", {}, [idx, depth, values], [None] * 3, [(3, 4)], ["float32"])
    with pytest.raises(AotcError, match="depth must be a constant"):
        OPS["OneHot"](ctx)


def test_one_hot_float_specials_are_off():
    """NaN and huge float indices match no position (their int64 conversion stays defined)."""
    idx = te.placeholder((5,), "float32", "i")
    depth, values = te.placeholder((), "int64", "d"), te.placeholder((2,), "float32", "v")
    ctx = OpContext("n", "OneHot", {}, [idx, depth, values], [None, np.asarray(3), None],
                    [(5, 3)], ["float32"])
    (out,) = OPS["OneHot"](ctx)
    x = np.asarray([np.nan, 1e30, -1e30, -1.5, 2.9], dtype=np.float32)
    got = run_te([idx, values], [out], [x, np.asarray([0, 1], dtype=np.float32)])[0]
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 1]])


# scatter_elements / scatter_nd ------------------------------------------------------------------

REDUCTIONS = ["none", "add", "mul", "max", "min"]


def small(*shape, dtype=np.float32):
    """Values whose products stay exact-ish and in range (mul reductions)."""
    v = RNG.integers(-3, 4, size=shape)
    v = v + (RNG.uniform(-0.5, 0.5, size=shape) if dtype == np.float32 else 0)
    return np.asarray(v, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape,axis,ishape", [
    ((3, 1, 5), 2, (3, 1, 7)),     # more updates than the axis: duplicates
    ((4, 5), -2, (3, 2)),          # indices smaller than data: the rest keeps data
    ((9,), 0, (4,)),
])
def test_scatter_elements(dtype, reduction, shape, axis, ishape):
    run_node("ScatterElements", [small(*shape, dtype=dtype), positions(shape[axis], *ishape),
                                 small(*ishape, dtype=dtype)],
             axis=axis, reduction=reduction)


def test_scatter_elements_constant_int32_indices():
    run_node("ScatterElements", [rand(4, 3), positions(4, 2, 3, dtype=np.int32), rand(2, 3)],
             consts={1})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape,ishape", [
    ((5, 1, 3), (7, 1)),           # slices of rank 2, duplicates
    ((4, 5), (3, 2, 2)),           # elements, a rank-2 grid of updates
    ((7, 3), (2,)),                # one tuple: a single element
])
def test_scatter_nd(dtype, reduction, shape, ishape):
    k = ishape[-1]
    idx = np.stack([positions(shape[m], *ishape[:-1]) for m in range(k)], -1)
    run_node("ScatterND", [small(*shape, dtype=dtype), idx,
                           small(*ishape[:-1], *shape[k:], dtype=dtype)], reduction=reduction)


@pytest.mark.parametrize("op,attrs,ishape,indices,want", [
    ("ScatterElements", {"axis": 0}, (3,), [9, -9, 2], [2, 0, 3, 0, 1]),
    ("ScatterND", {}, (3, 1), [[9], [-9], [2]], [2, 0, 3, 0, 1]),
])
def test_scatter_out_of_range_lands_on_the_edge(op, attrs, ishape, indices, want):
    """onnxruntime rejects out-of-range indices; aotc must not write outside the output."""
    data = te.placeholder((5,), "float32", "d")
    idx = te.placeholder(ishape, "int64", "i")
    upd = te.placeholder((3,), "float32", "u")
    ctx = OpContext("n", op, {**attrs, "reduction": "add"}, [data, idx, upd], [None] * 3,
                    [(5,)], ["float32"])
    (out,) = OPS[op](ctx)
    got = run_te([data, idx, upd], [out], [np.zeros(5, np.float32),
                                           np.asarray(indices, dtype=np.int64),
                                           np.asarray([1, 2, 3], dtype=np.float32)])[0]
    np.testing.assert_array_equal(got, np.asarray(want, dtype=np.float32))
