"""DFT: the discrete Fourier transform along one axis of a real ([..., 1]) or complex
([..., 2], real and imaginary parts) signal; inverse, one-sided (real-to-complex, and its
inverse complex-to-real) and a constant dft_length. An axis given at run time is one of the
axes the output's shape allows: each is built and the run-time value selects (pinned.py).

The transform is a direct sum: output bin k reads every input sample t with the twiddle
e^(∓2πi·kt/L), looked up in a table of cos/sin(2πm/L) (m = kt mod L) that a small stage fills
in float64 at the start of the kernel, so the O(L²) terms cost one multiply-add each and no
transcendental calls. Inputs are truncated or zero-padded to dft_length L as numpy's fft does
(the sum simply stops at min(n, L)). The inverse one-sided transform is numpy's irfft, which
ONNX's reference follows: the first L//2+1 bins extended by Hermitian symmetry, so each bin
0 < k < L/2 counts twice and only real parts survive; onnxruntime agrees when the input holds
exactly L//2+1 bins (with other counts its results follow neither numpy nor a rule we found).
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import axis_of

F64 = "float64"
# Composite lengths from this one on take Stockham's mixed-radix passes (radix 4 while it
# divides, then the prime factors: about log4 L passes over the data for powers of two) instead
# of the direct sum (L terms per output); a prime length is one pass of itself, i.e. the sum.
# (Below 64 the sum costs little more than the passes' index arithmetic, and it keeps the
# exact zeros a real signal's spectrum has, which the ONNX node tests compare to 1e-7.)
STOCKHAM_FROM = 64


def radices(length: int) -> list[int]:
    """The radix of each pass: 4 while it divides, then the prime factors, smallest first."""
    out, n = [], length
    while n % 4 == 0:
        out.append(4)
        n //= 4
    p = 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def twiddles(length: int, sign: float, dtype: str) -> te.Tensor:
    """A [length, 2, 2] table: entry [m, c, p] is what part p of a complex sample contributes
    to part c of its product with e^(sign·2πi·m/length) (cos on the diagonal, ∓sign·sin off
    it), computed in float64 and stored as dtype, so each term of a sum is one load and one
    multiply-add."""
    step = 2.0 * math.pi / length

    def body(m: te.Var, c: te.Var, p: te.Var) -> te.Expr:
        angle = te.cast(F64, m) * step
        sin = te.unary("sin", angle) * te.select(te.eq(c, 0), te.Const(-sign, F64),
                                                 te.Const(sign, F64))
        return te.cast(dtype, te.select(te.eq(c, p), te.unary("cos", angle), sin))

    return te.compute((length, 2, 2), body, name="dft_twiddle")


def dft(x: te.Tensor, axis: int, length: int, *, inverse: bool, onesided: bool,
        scale: float = 1.0) -> te.Tensor:
    """The transform of `x` ([..., 1 or 2]) along `axis` with dft_length `length`, every output
    multiplied by `scale` (an inverse already divides by `length`)."""
    dtype = x.dtype
    parts = x.shape[-1]
    n = x.shape[axis]
    real_out = inverse and onesided
    bins = length // 2 + 1 if onesided and not inverse else length
    out_shape = list(x.shape)
    out_shape[axis] = bins
    out_shape[-1] = 1 if real_out else 2
    # samples (forward) or bins (inverse) that the sum reads
    used = min(n, length // 2 + 1 if real_out else length)
    if used == 0 or length == 0:
        return te.compute(out_shape, lambda *o: te.Const(0, dtype), name="dft_empty")
    sign = 1.0 if inverse else -1.0
    table = twiddles(length, sign, dtype)
    norm = scale / length if inverse else scale
    if length >= STOCKHAM_FROM and len(radices(length)) > 1:
        return _stockham(x, axis, length, used, tuple(out_shape), table, sign, norm, real_out)

    def body(*o: te.Var) -> te.Expr:
        k, c = o[axis], o[-1]
        t = te.reduce_axis(used, "t")
        p = te.reduce_axis(parts, "p")
        idx = list(o)
        idx[axis], idx[-1] = t.var, p.var
        coef = table[(k * t.var) % length, c, p.var]
        if real_out:  # output sample k (c = 0) from bin t: Re(X_t e^{+iθ}) = Xr cos - Xi sin
            twice = te.logical_and(te.gt(t.var, 0), te.ne(t.var * 2, length))
            coef = coef * te.select(twice, te.Const(2 * norm, dtype), te.Const(norm, dtype))
        elif norm != 1.0:
            coef = coef * te.Const(norm, dtype)
        return te.reduce_sum(x[tuple(idx)] * coef, [t, p])

    return te.compute(out_shape, body, name="dft")


def _stockham(x: te.Tensor, axis: int, length: int, used: int, out_shape: tuple[int, ...],
              table: te.Tensor, sign: float, norm: float, real_out: bool) -> te.Tensor:
    """The transform for a composite length in passes of Stockham's autosort form (each pass
    reads the one before, the result comes out in natural order, no digit reversal): radix 4
    while it divides the length, then its prime factors (`radices`). A pass
    of radix r with stride st writes element j = q + st·(r·p + e) as
    w^(p·e) · Σ_k a_k · ω_r^(e·k), where a_k is element q + st·(p + k·n/r) of the pass before,
    ω_r = e^(±2πi/r) and w = e^(±2πi/n): the product of the two is one table entry, so each
    output is an r-term sum like the direct one, 2r multiply-adds (a butterfly would need fewer
    but its shared partial sums make each element's expression several times larger, which
    the schedule search pays for at every candidate). Radix 4 halves the passes over the data
    and the stages. The last pass computes only the output's bins (one-sided) and part (inverse
    one-sided: the real part of the Hermitian-extended spectrum's transform)."""
    dtype = x.dtype
    parts = x.shape[-1]
    half = length // 2
    shape = list(x.shape)
    shape[axis], shape[-1] = length, 2
    zero = te.Const(0, dtype)

    def read(o: tuple[te.Var, ...], t: te.Expr, c: te.Expr) -> te.Expr:
        idx = list(o)
        idx[axis] = te.minimum(t, used - 1)  # clamped: a select may evaluate both sides
        idx[-1] = te.minimum(c, parts - 1)
        inside = te.lt(t, used) if parts == 2 else te.logical_and(te.lt(t, used), te.eq(c, 0))
        return te.select(inside, x[tuple(idx)], zero)

    def signal(*o: te.Var) -> te.Expr:
        t, c = o[axis], o[-1]
        if not real_out:
            return read(o, t, c)
        # the full spectrum from bins 0..length/2: bin k > length/2 is conj(bin length - k)
        mirrored = te.gt(t, half)
        v = read(o, te.select(mirrored, length - t, t), c)
        return te.select(te.logical_and(mirrored, te.eq(c, 1)), -v, v)

    # materialised: inlined, its selects would be copied into each of the first pass's loads
    prev = te.compute(shape, signal, name="fft_in")
    stride, n = 1, length
    for radix in radices(length):
        last = n == radix

        def body(*o: te.Var, prev: te.Tensor = prev, stride: int = stride, n: int = n,
                 radix: int = radix, last: bool = last) -> te.Expr:
            j, c = o[axis], o[-1]
            q, t = j % stride, j // stride
            p, e = t // radix, t % radix
            total: te.Expr | None = None
            for k in range(radix):
                idx = list(o)
                idx[axis] = q + (p + k * (n // radix)) * stride
                # ω_r^(e·k) · w^(p·e) = e^(±2πi·m/L), m = e·(k·L/r + p·st) mod L
                m = (e * (p * stride + k * (length // radix))) % length
                for part in (0, 1):
                    idx[-1] = te.Const(part, "int64")
                    term = prev[tuple(idx)] * table[m, c, part]
                    total = term if total is None else total + term
            assert total is not None
            if last and norm != 1.0:
                total = total * te.Const(norm, dtype)
            if last and parts == 1 and not real_out:
                # a real signal's bins 0 and L/2 are real: rounding in the passes would leave
                # noise of the spectrum's magnitude times ε in their imaginary parts
                real_bin = te.logical_or(te.eq(j, 0), te.eq(j * 2, length))
                total = te.select(te.logical_and(real_bin, te.eq(c, 1)), te.Const(0, dtype),
                                  total)
            return total

        prev = te.compute(out_shape if last else shape, body, name=f"fft_radix{radix}")
        stride, n = stride * radix, n // radix
    return prev


def int_scalar(ctx: OpContext, i: int, what: str) -> int:
    """Constant input `i`, one integer (what sets a shape: a length, an axis)."""
    v = ctx.const(i, what)
    if v.size != 1 or v.dtype.kind not in "iu":
        raise ctx.error(f"{what} must be one integer, got {v.dtype} of shape {list(v.shape)}")
    return int(v.reshape(-1)[0])


@register_op("DFT")
def dft_op(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    rank = len(x.shape)
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"DFT of {x.dtype} is not supported (floats only)")
    if rank < 2 or x.shape[-1] not in (1, 2):
        raise ctx.error(f"input shape {list(x.shape)}: the last axis must be 1 (real) or 2 "
                        "(complex)")
    inverse = bool(ctx.attr("inverse", 0))
    onesided = bool(ctx.attr("onesided", 0))
    if onesided and not inverse and x.shape[-1] != 1:
        raise ctx.error("a one-sided DFT takes a real input (last axis 1)")
    given = pinned.run_time(ctx, 2)
    if given is None:
        # opset 20 takes the axis as input 2 (default -2); opset 17's attribute if still present
        axis = int_scalar(ctx, 2, "axis") if ctx.has_input(2) else int(ctx.attr("axis", -2))
        return [_dft_along(ctx, x, axis_of(ctx, axis, rank), inverse, onesided)]
    # an axis given at run time: each axis the output's shape allows is a meaning
    fitting = [d for d in range(rank - 1) if _out_shape(ctx, x, d, inverse, onesided)
               == tuple(ctx.out_shapes[0])]
    if given.size != 1 or not fitting or len(fitting) > pinned.MAX_MEANINGS:
        raise pinned.ambiguous(ctx, 2, "axis", " or ".join(f"axis {d}" for d in fitting)
                               if given.size == 1 and fitting else "no one axis")
    value = pinned.elements(given)[0]
    fits = [pinned.axis_fits(value, d, rank) for d in fitting]
    pinned.require(ctx, te.any_of(fits), "axis must be " + " or ".join(map(str, fitting)))
    outs = [_dft_along(ctx, x, d, inverse, onesided) for d in fitting]
    return [pinned.by_meaning(fits, outs, "dft")]


def _length(ctx: OpContext, n: int, inverse: bool, onesided: bool) -> int:
    """The dft_length: input 1, or the axis's (a one-sided inverse's full) length."""
    if ctx.has_input(1):
        length = int_scalar(ctx, 1, "dft_length")
        if length <= 0:
            raise ctx.error(f"dft_length {length} must be positive")
        return length
    length = 2 * (n - 1) if inverse and onesided else n
    if length <= 0:
        raise ctx.error(f"an inverse one-sided DFT of {n} bins needs a dft_length")
    return length


def _out_shape(ctx: OpContext, x: te.Tensor, axis: int, inverse: bool, onesided: bool
               ) -> tuple[int, ...] | None:
    """The output's shape along `axis` (None where the axis's length allows no transform)."""
    n = x.shape[axis]
    if n == 0 or (not ctx.has_input(1) and inverse and onesided and n < 2):
        return None
    length = _length(ctx, n, inverse, onesided)
    shape = list(x.shape)
    shape[axis] = length // 2 + 1 if onesided and not inverse else length
    shape[-1] = 1 if onesided and inverse else 2
    return tuple(shape)


def _dft_along(ctx: OpContext, x: te.Tensor, axis: int, inverse: bool, onesided: bool
               ) -> te.Tensor:
    if axis == len(x.shape) - 1:
        raise ctx.error("axis must not be the last axis (it holds the real/imaginary parts)")
    length = _length(ctx, x.shape[axis], inverse, onesided)
    out = dft(x, axis, length, inverse=inverse, onesided=onesided)
    if out.shape != tuple(ctx.out_shapes[0]):
        raise ctx.error(f"output shape {list(out.shape)} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")
    return out
