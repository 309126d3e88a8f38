"""Code generator choices: selects with loads evaluated on both sides (vectorisable) only when
every load is provably in bounds, else as branches; index intervals from loop ranges; the vector
width kernels ask LLVM for."""

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from kernel_harness import run_te  # noqa: E402

from lowering import te  # noqa: E402
from lowering.default_schedule import default_schedule  # noqa: E402
from lowering.lower import lower_kernel  # noqa: E402
from lowering.ops.nn.geometry import padded_input  # noqa: E402
from targets.cpu.codegen import ModuleBuilder, interval  # noqa: E402
from targets.cpu.target import host_target  # noqa: E402


def test_interval_arithmetic():
    i, j = te.Var("i"), te.Var("j")
    ranges = {i: (0, 9), j: (0, 3)}
    assert interval(i * 4 + j, ranges) == (0, 39)
    assert interval(i - 2, ranges) == (-2, 7)
    assert interval(te.minimum(te.maximum(i - 2, 0), 5), ranges) == (0, 5)
    assert interval((i * 4 + j) // 8, ranges) == (0, 4)
    assert interval((i * 4 + j) % 8, ranges) == (0, 7)
    assert interval(i * j, {**ranges, j: (-1, 3)}) == (-9, 27)
    assert interval(te.Var("k"), ranges) is None  # unknown variable: no bound


def _kernel_ir(inputs, outputs) -> str:
    t = host_target()
    k = lower_kernel("k_sel", inputs, outputs, lambda s: default_schedule(s, t.vector_lanes_f32))
    mb = ModuleBuilder(t)
    mb.add_kernel(k)
    return mb.text()


def test_clamped_padding_is_a_plain_select():
    x = te.placeholder((2, 3, 5, 7), "float32", "x")
    p = padded_input(x, (1, 2), (8, 11), 0.0)
    ir = _kernel_ir([x], [p])
    assert "select i1" in ir and "label %St" not in ir
    xv = np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(np.float32)
    got = run_te([x], [p], [xv])[0]
    want = np.pad(xv, ((0, 0), (0, 0), (1, 2), (2, 2)))
    np.testing.assert_array_equal(got, want)


def test_load_that_may_be_out_of_bounds_stays_a_branch():
    x = te.placeholder((10, 4), "float32", "x")
    # x[i - 3] is out of bounds for i < 3: only the taken side may load (the condition is on
    # the outer loop, so boundary partitioning of the inner loop leaves the select)
    y = te.compute((13, 4), lambda i, j: te.select(te.ge(i, 3), x[i - 3, j], 0.0),
                   name="shift")
    ir = _kernel_ir([x], [y])
    assert "label %St" in ir
    xv = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.testing.assert_array_equal(run_te([x], [y], [xv])[0],
                                  np.concatenate([np.zeros((3, 4), np.float32), xv]))


def test_boundary_condition_on_the_inner_loop_is_partitioned_away():
    x = te.placeholder((10,), "float32", "x")
    y = te.compute((13,), lambda i: te.select(te.ge(i, 3), x[i - 3], 0.0), name="shift")
    ir = _kernel_ir([x], [y])
    assert "label %St" not in ir  # zeros for i < 3, a plain copy after
    xv = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(run_te([x], [y], [xv])[0],
                                  np.concatenate([np.zeros(3, np.float32), xv]))


def test_kernels_ask_for_the_full_vector_width():
    """LLVM would pick 256-bit vectors on AVX-512 machines; kernels ask for the target's width."""
    from targets.cpu.target import NAMED_TARGETS

    x = te.placeholder((64,), "float32", "x")
    y = te.compute((64,), lambda i: x[i] * 2.0, name="twice")
    for name, want in (("cpu-avx512", True), ("cpu-avx2", False), ("aarch64", False)):
        k = lower_kernel("k_w", [x], [y], lambda s: default_schedule(s, 16))
        mb = ModuleBuilder(NAMED_TARGETS[name])
        mb.add_kernel(k)
        assert ('"prefer-vector-width"="512"' in mb.text()) == want, name


def test_parallel_loop_runs_from_its_start():
    """The thread pool hands out [0, extent - start); the outlined body shifts each range by
    the loop's start (the first iterations are not run, the last ones are)."""
    from kernel_harness import run_kernel

    from lowering.loop_ir import Buffer, For, Kernel, Store

    out = Buffer("o0", "float32", (8,), "output")
    i = te.Var("i")
    body = Store(out, i, te.cast("float32", i) + te.Const(1.0, "float32"))
    kernel = Kernel("k_par", [out], [For(i, te.Const(8, "int64"), "parallel", body,
                                          start=te.Const(3, "int64"))])
    np.testing.assert_array_equal(run_kernel(kernel, [])[0], [0, 0, 0, 4, 5, 6, 7, 8])


def test_scheduled_reductions_combine_lanes_by_halves():
    """A vectorised reduction loop (interleave > 0) marks its accumulating add `reassoc`, and
    nothing else: LLVM then combines the vector lanes at the end in log2 steps instead of 15
    dependent scalar adds, and the value's own arithmetic keeps its order."""
    from kernel_harness import run_kernel

    from lowering.loop_ir import Buffer, BufLoad, For, Kernel, Store
    from targets.cpu.codegen import optimized_module
    from targets.cpu.target import target_machine

    x = Buffer("i0", "float32", (256,), "input")
    out = Buffer("o1", "float32", (1,), "output")
    c = te.Var("c")
    zero = te.Const(0, "int64")
    value = BufLoad(x, c) * te.Const(3.0, "float32") + te.Const(1.0, "float32")
    kernel = Kernel("k_red", [x, out], [
        Store(out, zero, te.Const(0.0, "float32")),
        For(c, te.Const(256, "int64"), "vectorize",
            Store(out, zero, BufLoad(out, zero) + value), interleave=4)])
    mb = ModuleBuilder(host_target())
    mb.add_kernel(kernel)
    text = mb.text()
    assert text.count("reassoc") == 1 and "fadd reassoc contract float" in text
    asm = target_machine(host_target()).emit_assembly(optimized_module(text, host_target()))
    assert asm.count("vaddss") + asm.count("addss") < 8
    xs = np.arange(256, dtype=np.float32) / 64
    (got,) = run_kernel(kernel, [xs])
    np.testing.assert_allclose(got[0], float((xs.astype(np.float64) * 3 + 1).sum()), rtol=1e-6)


def test_shift_maximum_reduces_by_halves_and_propagates_nan():
    """A scheduled `max_nan` reduction (softmax's shift) is `llvm.maximum` with `reassoc nsz`:
    LLVM reduces its lanes as a tree of vector maxima, not 15 dependent scalar steps; a NaN
    anywhere gives NaN, and otherwise the result is the maximum."""
    from kernel_harness import run_kernel

    from lowering.loop_ir import Buffer, BufLoad, For, Kernel, Store
    from lowering.lower import combine
    from targets.cpu.codegen import optimized_module
    from targets.cpu.target import target_machine

    x = Buffer("i0", "float32", (256,), "input")
    out = Buffer("o1", "float32", (1,), "output")
    c = te.Var("c")
    zero = te.Const(0, "int64")
    kernel = Kernel("k_max", [x, out], [
        Store(out, zero, te.reduce_identity("max_nan", "float32")),
        For(c, te.Const(256, "int64"), "vectorize",
            Store(out, zero, combine("max_nan", BufLoad(out, zero), BufLoad(x, c))),
            interleave=4)])
    mb = ModuleBuilder(host_target())
    mb.add_kernel(kernel)
    text = mb.text()
    assert "call reassoc nsz float @llvm.maximum.f32" in text
    asm = target_machine(host_target()).emit_assembly(optimized_module(text, host_target()))
    assert asm.count("maxss") < 8  # a chain over the lanes would be 15 (v)maxss
    rng = np.random.default_rng(3)
    for nan_at in (None, 0, 77, 255):
        xs = rng.standard_normal(256).astype(np.float32) - 5
        if nan_at is not None:
            xs[nan_at] = np.nan
        (got,) = run_kernel(kernel, [xs])
        if nan_at is None:
            assert got[0] == xs.max()
        else:
            assert np.isnan(got[0])
