"""GridSample's per-axis arithmetic, as onnxruntime computes it: a normalised grid value to an
input coordinate, reflection padding's mirroring of a coordinate outside the image, and the
taps (input positions and weights) each interpolation mode reads around it.

All of it is float arithmetic in the compute type (float64 for float64 images, else float32),
written operation for operation as onnxruntime's `grid_sample.cc`. Every float turned into an
index is first clamped into a range an int64 holds (te's `max` drops a NaN), so a wild or NaN
grid value still reads inside the image.
"""

from __future__ import annotations

from dataclasses import dataclass

from lowering import te

CUBIC_ALPHA = -0.75  # Keys' cubic convolution, as PyTorch and onnxruntime
SAFE = float(1 << 40)  # coordinates beyond this are clamped before becoming integers


@dataclass(frozen=True)
class Axis:
    """One spatial axis: its length, and the range inside which no padding applies."""

    length: int
    align_corners: bool
    dtype: str  # the compute type

    def c(self, v: float) -> te.Expr:
        return te.Const(v, self.dtype)

    @property
    def low(self) -> float:
        return 0.0 if self.align_corners else -0.5

    @property
    def high(self) -> float:
        return self.length - 1.0 if self.align_corners else self.length - 0.5

    def denormalize(self, g: te.Expr) -> te.Expr:
        """[-1, 1] to pixel coordinates: the corners' centres (align_corners) or edges."""
        if self.align_corners:
            return (g + self.c(1.0)) / self.c(2.0) * self.c(self.length - 1)
        return ((g + self.c(1.0)) * self.c(self.length) - self.c(1.0)) / self.c(2.0)

    def outside(self, x: te.Expr) -> te.Expr:
        return te.logical_or(te.lt(x, self.c(self.low)), te.gt(x, self.c(self.high)))

    def reflect(self, x: te.Expr) -> te.Expr:
        """x mirrored at the range's ends until it lies inside (onnxruntime's GsReflect)."""
        lo, hi = self.low, self.high
        span = hi - lo
        if span <= 0:  # one pixel with align_corners: every coordinate is that pixel
            return self.c(lo)
        below = te.lt(x, self.c(lo))
        dist = te.select(below, self.c(lo) - x, x - self.c(hi))
        dist = te.minimum(te.maximum(dist, self.c(0.0)), self.c(SAFE))
        folds = te.cast("int64", dist / self.c(span))
        rest = dist - te.cast(self.dtype, folds) * self.c(span)
        even = te.eq(folds % 2, 0)
        from_low = te.eq(below, even)  # below and even, or above and odd
        mirrored = te.select(from_low, self.c(lo) + rest, self.c(hi) - rest)
        return te.select(self.outside(x), mirrored, x)

    def to_index(self, x: te.Expr) -> te.Expr:
        """A float coordinate truncated to an int64 (after clamping into a safe range)."""
        return te.cast("int64", te.minimum(te.maximum(x, self.c(-SAFE)), self.c(SAFE)))

    def tap(self, i: te.Expr, padding: str) -> te.Expr:
        """The input position tap i reads under `padding`; -1 for a zero (zeros padding)."""
        n = self.length
        if padding == "zeros":
            inside = te.logical_and(te.ge(i, 0), te.lt(i, n))
            return te.select(inside, i, te.Const(-1, "int64"))
        if padding == "border":
            return te.minimum(te.maximum(i, te.Const(0, "int64")), te.Const(n - 1, "int64"))
        j = self.to_index(self.reflect(te.cast(self.dtype, i)))
        return te.minimum(te.maximum(j, te.Const(0, "int64")), te.Const(n - 1, "int64"))


def tap_count(mode: str) -> int:
    return {"nearest": 1, "linear": 2, "cubic": 4}[mode]


def first_tap(mode: str, x: te.Expr, axis: Axis) -> te.Expr:
    """The position of a coordinate's first tap (int64)."""
    if mode == "nearest":
        return axis.to_index(x)
    base = axis.to_index(te.unary("floor", x))
    return base - 1 if mode == "cubic" else base


def weight(mode: str, t: int, x: te.Expr, axis: Axis) -> te.Expr:
    """Tap t's weight for coordinate x."""
    frac = x - te.unary("floor", x)
    if mode == "linear":
        return axis.c(1.0) - frac if t == 0 else frac
    a = axis.c(CUBIC_ALPHA)
    one, two = axis.c(1.0), axis.c(2.0)
    # Keys' kernel at distance d from the tap: far taps (1 < d < 2), near ones (d <= 1)
    d = (frac + one, frac, one - frac, two - frac)[t]

    def far(d: te.Expr) -> te.Expr:
        return ((a * d - axis.c(5.0) * a) * d + axis.c(8.0) * a) * d - axis.c(4.0) * a

    def near(d: te.Expr) -> te.Expr:
        return ((a + two) * d - (a + axis.c(3.0))) * d * d + one

    return far(d) if t in (0, 3) else near(d)
