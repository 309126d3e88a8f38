"""The loop-IR verifier (lowering/verify.py): each rule broken once by a hand-made kernel gives a
LoopIRError naming the kernel and the statement; kernels the builders make pass; the compiler
runs it on every kernel it adds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aotc.driver import compile_file  # noqa: E402
from lowering import te  # noqa: E402
from lowering.default_schedule import default_schedule  # noqa: E402
from lowering.loop_ir import (  # noqa: E402
    Buffer,
    BufLoad,
    BufPtr,
    Call,
    For,
    Kernel,
    Seq,
    Store,
)
from lowering.lower import lower_kernel  # noqa: E402
from lowering.nest import HandNest  # noqa: E402
from lowering.verify import LoopIRError, verify_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def c(v: int) -> te.Const:
    return te.Const(v, "int64")


def copy_kernel(**change) -> Kernel:
    """y[i] = x[i] * 2 over 8 elements, with `change` replacing parts."""
    x = change.get("x", Buffer("i0", "float32", (8,), "input"))
    y = change.get("y", Buffer("o1", "float32", (8,), "output"))
    i = te.Var("i")
    var = change.get("var", i)
    value = change.get("value", BufLoad(x, i) * te.Const(2.0, "float32"))
    body = Store(change.get("dst", y), change.get("index", i), value)
    loop = For(var, c(8), change.get("kind", "serial"), body)
    return Kernel("k", change.get("buffers", [x, y]), [change.get("stage", loop)])


def test_a_kernel_the_lowering_builds_passes() -> None:
    x = te.placeholder((4, 16), "float32", "x")
    y = te.compute((4, 16), lambda i, j: x[i, j] * x[i, 0], name="y")
    r = te.reduce_axis(16, "r")
    s = te.compute((4,), lambda i: te.reduce("sum", y[i, r.var], [r]), name="s")
    kernel = lower_kernel("k", [x], [s], lambda t: default_schedule(t, 8))
    assert verify_kernel(kernel) is kernel
    assert verify_kernel(copy_kernel()) is not None


def test_every_rule() -> None:
    x = Buffer("i0", "float32", (8,), "input")
    y = Buffer("o1", "float32", (8,), "output")
    stranger = Buffer("s9", "float32", (8,), "scratch")
    i, j = te.Var("i"), te.Var("j")
    placeholder = te.placeholder((8,), "float32", "t")
    cases = {
        "variable j is not bound": copy_kernel(index=j),
        "buffer s9 is not one of the kernel's": copy_kernel(dst=stranger),
        "the buffer is an input": copy_kernel(dst=x, x=x, y=y),
        "a float32 value into a int64 buffer": copy_kernel(
            y=Buffer("o1", "int64", (8,), "output")),
        "a float64 value into a float16 buffer": copy_kernel(
            value=te.Const(2.0, "float64"), y=Buffer("o1", "float16", (8,), "output")),
        "unknown loop kind 'sideways'": copy_kernel(kind="sideways"),
        "a tensor load \\(t\\) left unlowered": copy_kernel(value=placeholder[i]),
        "stands for a stage that only a template lowers": copy_kernel(
            value=HandNest("nest", "float32")),
        "an index of type float32": copy_kernel(index=te.Const(1.0, "float32")),
        "out of ABI order": copy_kernel(buffers=[y, x]),
        "buffer names repeat": copy_kernel(buffers=[x, Buffer("i0", "float32", (8,),
                                                                  "output")]),
        "bound by an enclosing loop already": Kernel("k", [x, y], [For(i, c(2), "serial", For(
            i, c(4), "serial", Store(y, i, BufLoad(x, i))))]),
        "call aotc_f": Kernel("k", [x, y], [Seq([Call("aotc_f", [BufPtr(stranger, c(0))])])]),
    }
    for message, kernel in cases.items():
        with pytest.raises(LoopIRError, match=message):
            verify_kernel(kernel)


def test_a_float32_value_into_a_half_buffer_is_a_rounding_store() -> None:
    # te.py's contract: a half or narrow float is a float32 in registers, a store rounds (the
    # tensor-core staging copies store float32 operands into float16 buffers this way).
    for dtype in ("float16", "bfloat16", "float8_e4m3fn"):
        verify_kernel(copy_kernel(y=Buffer("o1", dtype, (8,), "output")))


def test_the_compiler_verifies_every_kernel_it_adds(monkeypatch) -> None:
    import aotc.compiler

    seen: list[str] = []

    def spy(kernel: Kernel) -> Kernel:
        seen.append(kernel.name)
        return verify_kernel(kernel)

    monkeypatch.setattr(aotc.compiler, "verify_kernel", spy)
    program, _ = compile_file(ROOT / "models" / "mobilenet_tiny.onnx", input_shapes=[])
    kernels = {st.kernel for st in program.steps if hasattr(st, "kernel")}
    assert seen and kernels <= set(seen)
