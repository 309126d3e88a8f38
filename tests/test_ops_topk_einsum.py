"""TopK and Einsum against onnxruntime.

TopK: largest and smallest along every axis, rows short (ranked whole) and long (ranked in
blocks), many ties, NaN, ±inf and ±0, integer and float types, k from 1 to the whole row, the
backend node cases with their k frozen to a constant, and k given at run time refused.
Einsum: the forms exporters write (batched matmul, transposed operands, reductions, diagonals,
outer products, broadcasting with `...`), and that matmul forms get the GEMM template.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from backend_cases import backend_cases, frozen  # noqa: E402
from program_runner import compile_onnx, node_model, ort_outputs, run_program  # noqa: E402

from aotc.errors import AotcError  # noqa: E402
from lowering.ops.reduce.topk_select import block_size  # noqa: E402

RNG = np.random.default_rng(17)
NAN, INF = np.nan, np.inf


def topk_outputs(x: np.ndarray, k: int, **attrs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """aotc's and onnxruntime's (values, indices) of a TopK node with a constant k."""
    model, feeds = node_model("TopK", [x, np.array([k], np.int64)], consts=(1,),
                              outputs=(True, True), **attrs)
    return run_program(compile_onnx(model), feeds), ort_outputs(model, feeds)


def assert_topk(x: np.ndarray, k: int, **attrs) -> None:
    got, want = topk_outputs(x, k, **attrs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


# --- TopK --------------------------------------------------------------------------------------

@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_topk_axes_with_ties(axis: int, largest: int) -> None:
    x = RNG.integers(-3, 4, size=(5, 7, 6)).astype(np.float32)  # small integers: many ties
    assert_topk(x, 3, axis=axis, largest=largest)


@pytest.mark.parametrize("n,k", [(300, 1), (300, 17), (1000, 10), (1000, 64), (777, 100),
                                 (50_000, 50)])
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_long_rows_are_blocked(n: int, k: int, largest: int) -> None:
    assert block_size(n, k) is not None  # the blocked form, not n² compares
    x = RNG.integers(0, n // 4, size=(2, n)).astype(np.float32)  # ties across blocks
    assert_topk(x, k, largest=largest)


@pytest.mark.parametrize("k", [1, 5, 40, 41])
def test_topk_short_rows_and_whole_row(k: int) -> None:
    x = RNG.standard_normal((3, 41)).astype(np.float32)
    assert_topk(x, k)
    assert_topk(x, k, largest=0)


def test_topk_long_rows_on_a_middle_axis() -> None:
    x = RNG.integers(0, 40, size=(3, 500, 4)).astype(np.int32)
    assert block_size(500, 9) is not None
    assert_topk(x, 9, axis=1)
    assert_topk(x, 9, axis=-2, largest=0)


@pytest.mark.parametrize("n", [12, 600])
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_nan_inf_and_signed_zeros(n: int, largest: int) -> None:
    """NaN ranks above every number (first when largest, last when smallest), ±0 are equal
    and keep index order, as onnxruntime."""
    x = RNG.standard_normal((6, n)).astype(np.float32)
    x[RNG.random(x.shape) < 0.1] = NAN
    x[0] = NAN
    x[1, ::3] = INF
    x[1, 1::3] = -INF
    x[2] = RNG.choice(np.array([0.0, -0.0], np.float32), n)
    x[3, : n // 2] = NAN
    assert_topk(x, min(n, 10), largest=largest)
    assert_topk(x, n, largest=largest)


def reference_topk(x: np.ndarray, k: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a 2-D integer array ranked by Python ints (exact for uint64), ties by index."""
    sign = -1 if largest else 1
    idx = np.array([sorted(range(x.shape[1]), key=lambda i, r=r: (sign * int(r[i]), i))[:k]
                    for r in x], np.int64)
    return np.take_along_axis(x, idx, 1), idx


def test_topk_uint64_as_the_reference() -> None:
    """onnxruntime has no uint64 TopK; values past 2^63 must compare unsigned."""
    x = RNG.integers(0, 2**64 - 1, size=(3, 300), dtype=np.uint64, endpoint=True)
    x[:, :40] = 2**64 - 1
    x[:, 40:80] = 0
    for largest in (1, 0):
        model, feeds = node_model("TopK", [x, np.array([9], np.int64)], consts=(1,),
                                  outputs=(True, True), largest=largest)
        got = run_program(compile_onnx(model), feeds)
        for g, w in zip(got, reference_topk(x, 9, bool(largest)), strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int64, np.int32, np.int8,
                                   np.uint8])
def test_topk_types(dtype: type) -> None:
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if info is not None:
        x = RNG.integers(info.min, info.max, size=(4, 300), dtype=dtype, endpoint=True)
        x[:, :30] = info.max  # extremes and ties
        x[:, 30:60] = info.min
    else:
        x = RNG.integers(-20, 20, size=(4, 300)).astype(dtype)
    assert_topk(x, 7)
    assert_topk(x, 7, largest=0)
    assert_topk(x[:, :20], 20)


def test_topk_odd_shapes() -> None:
    assert_topk(np.array([3.0], np.float32), 1)
    assert_topk(RNG.standard_normal(13).astype(np.float32), 4)
    assert_topk(RNG.standard_normal((1, 1, 9)).astype(np.float32), 9, axis=2)
    assert_topk(RNG.standard_normal((7, 1)).astype(np.float32), 1, axis=1)


def test_topk_unsorted_gives_the_same_elements() -> None:
    """sorted=0 leaves the order open; aotc's is sorted, onnxruntime's is not."""
    x = RNG.integers(0, 9, size=(4, 200)).astype(np.float32)
    (vals, idx), (wvals, widx) = topk_outputs(x, 12, sorted=0)
    np.testing.assert_array_equal(np.sort(idx, axis=1), np.sort(widx, axis=1))
    np.testing.assert_array_equal(np.take_along_axis(x, idx, 1), vals)


def test_topk_k_at_run_time_is_refused() -> None:
    x = RNG.standard_normal((2, 10)).astype(np.float32)
    model, _ = node_model("TopK", [x, np.array([3], np.int64)], outputs=(True, True))
    with pytest.raises(AotcError):
        compile_onnx(model)


def test_topk_k_out_of_range_is_refused() -> None:
    x = RNG.standard_normal((2, 10)).astype(np.float32)
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("TopK", ["x", "k"], ["v", "i"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [onnx.helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, (2, 11)),
         onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, (2, 11))],
        initializer=[onnx.numpy_helper.from_array(np.array([11], np.int64), "k")]),
        opset_imports=[onnx.helper.make_opsetid("", 21)], ir_version=10)
    with pytest.raises(AotcError, match="TopK|k"):
        compile_onnx(model)


@pytest.mark.parametrize("case", backend_cases("test_top_k"), ids=lambda c: c.name)
def test_topk_backend_cases_with_k_frozen(case) -> None:
    model, feeds, want = frozen(case, [1])
    got = run_program(compile_onnx(model), feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


# --- Einsum ------------------------------------------------------------------------------------

def einsum_outputs(equation: str, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    model, feeds = node_model("Einsum", inputs, equation=equation)
    return run_program(compile_onnx(model), feeds)[0], ort_outputs(model, feeds)[0]


def assert_einsum(equation: str, *shapes: tuple[int, ...], dtype: type = np.float32) -> None:
    inputs = [(RNG.standard_normal(s) * 3).astype(dtype) for s in shapes]
    got, want = einsum_outputs(equation, inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = {np.float16: 1e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
        scale = max(1.0, float(np.abs(want.astype(np.float64)).max(initial=0)))
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol * scale)


FORMS = [
    ("bij,bjk->bik", (3, 5, 7), (3, 7, 4)),        # batched matmul
    ("ij,kj->ik", (6, 9), (5, 9)),                 # B transposed (a Linear layer)
    ("ji,jk->ik", (9, 6), (9, 5)),                 # A transposed
    ("ij,jk", (4, 3), (3, 6)),                     # implicit output
    ("bhqd,bhkd->bhqk", (2, 3, 5, 8), (2, 3, 7, 8)),  # attention scores
    ("bhqk,bhkd->bhqd", (2, 3, 5, 7), (2, 3, 7, 8)),
    ("ij->ji", (4, 7)),                            # transpose
    ("abc->cab", (2, 3, 4)),
    ("ij->i", (5, 6)),                             # reductions
    ("ij->j", (5, 6)),
    ("ij->", (5, 6)),
    ("ii->i", (5, 5)),                             # diagonal
    ("ii", (6, 6)),                                # trace
    ("bii->bi", (3, 4, 4)),
    ("...ii->...i", (2, 3, 4, 4)),
    ("i,j->ij", (5,), (7,)),                       # outer product
    ("bi,bj->bij", (3, 4), (3, 5)),
    ("i,i", (9,), (9,)),                           # inner product
    ("ij,ij->ij", (4, 5), (4, 5)),                 # element-wise
    ("...ij,...jk->...ik", (2, 1, 3, 4), (1, 5, 4, 6)),  # broadcast batch
    ("...ij,jk->...ik", (2, 3, 4), (4, 5)),
    ("...i,i->...", (3, 2, 6), (6,)),
    ("i...,i->...", (6, 2, 3), (6,)),
    ("abc,cd,de->abe", (2, 3, 4), (4, 5), (5, 6)),  # a chain, contracted left to right
    ("ij,jk,kl", (3, 4), (4, 5), (5, 2)),
    (" ij , jk -> ik ", (3, 4), (4, 2)),           # spaces
    ("ij,j->i", (3, 1), (4,)),                      # an axis of 1 broadcasts
]


@pytest.mark.parametrize("equation,shapes", [(f[0], f[1:]) for f in FORMS],
                         ids=[f[0].replace(" ", "_") for f in FORMS])
def test_einsum_forms(equation: str, shapes: tuple) -> None:
    assert_einsum(equation, *shapes)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64])
def test_einsum_types(dtype: type) -> None:
    assert_einsum("bij,bjk->bik", (2, 3, 4), (2, 4, 5), dtype=dtype)
    assert_einsum("ij->j", (5, 6), dtype=dtype)


def test_einsum_upper_case_implicit_order_as_numpy() -> None:
    """Implicit output letters sort in ASCII order (upper case first), numpy's rule, which
    ONNX's reference follows (onnxruntime refuses upper case there)."""
    a, b = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((3, 4))
    b = b.astype(np.float32)
    model, feeds = node_model("Einsum", [a, b], equation="Ba,ab")
    got = run_program(compile_onnx(model), feeds)[0]
    np.testing.assert_allclose(got, np.einsum("Ba,ab", a, b), rtol=1e-5)


@pytest.mark.parametrize("target", ["cpu-avx2", "cpu-avx512", "aarch64"])
def test_einsum_matmul_gets_the_gemm_template(target: str) -> None:
    """Structure, not code that runs: named targets, so it holds on every host."""
    from lowering import te
    from lowering.ops import OpContext, run_op
    from lowering.search.select import space_for
    from targets.cpu.target import get_target

    a = te.placeholder((4, 64, 96), "float32", "a")
    b = te.placeholder((4, 96, 80), "float32", "b")
    for eq, bb in (("bij,bjk->bik", b), ("bij,bkj->bik", te.placeholder((4, 80, 96),
                                                                       "float32", "b"))):
        ctx = OpContext("n", "Einsum", {"equation": eq}, [a, bb], [None, None],
                        [(4, 64, 80)], ["float32"])
        space = space_for([a, bb], run_op(ctx), [None, None], get_target(target))
        assert space.kind == "gemm", eq


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (5, 6)]),        # extents differ
    ("ij->k", [(3, 4)]),                    # an output label no operand has
    ("ij,jk", [(3, 4)]),                    # operand count
    ("ijk->i", [(3, 4)]),                   # too many labels
    ("...ij->ij", [(2, 3, 4)]),             # ellipsis axes left out
    ("i1->i", [(3, 4)]),                    # not a letter
])
def test_einsum_bad_equations_are_refused(equation: str, shapes: list) -> None:
    from lowering import te
    from lowering.ops import OpContext, run_op

    ins = [te.placeholder(s, "float32", f"x{i}") for i, s in enumerate(shapes)]
    ctx = OpContext("n", "Einsum", {"equation": equation}, ins, [None] * len(ins), [],
                    ["float32"])
    with pytest.raises(AotcError, match="Einsum"):
        run_op(ctx)
