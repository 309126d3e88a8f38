"""Tensor expressions + schedules → loop IR kernels."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lowering import te
from lowering.loop_ir import Buffer, BufLoad, For, Kernel, Seq, Stmt, Store
from lowering.schedule import Loop, ScheduleError, StageSchedule

ScheduleFn = Callable[[te.Tensor], StageSchedule]


def stages_of(outputs: Sequence[te.Tensor]) -> list[te.Tensor]:
    """Compute tensors the outputs depend on, producers first."""
    order: list[te.Tensor] = []
    seen: set[int] = set()

    def visit(t: te.Tensor) -> None:
        if id(t) in seen or t.op is None:
            return
        seen.add(id(t))
        for dep in te.tensors_read(t.op.body):
            visit(dep)
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def flat_index(buf: Buffer, idx: Sequence[te.Expr]) -> te.Expr:
    out: te.Expr = te.Const(0, "int64")
    for i, stride in zip(idx, buf.strides, strict=True):
        out = out + i * stride
    return out


class _Converter:
    """Rewrites a TE body into a loop-IR expression: buffer loads, inlined stages."""

    def __init__(self, bufs: dict[int, Buffer]) -> None:
        self.bufs = bufs

    def __call__(self, e: te.Expr) -> te.Expr:
        if isinstance(e, (te.Var, te.Const)):
            return e
        if isinstance(e, te.Load):
            t = e.tensor
            idx = [self(i) for i in e.indices]
            if id(t) not in self.bufs:
                if t.op is None or not t.op.inline:
                    raise ScheduleError(f"tensor {t.name} has no buffer")
                vmap = {ax.var: i for ax, i in zip(t.op.axes, idx, strict=True)}
                return self(te.substitute(t.op.body, vmap))
            buf = self.bufs[id(t)]
            return BufLoad(buf, flat_index(buf, idx))
        if isinstance(e, te.Binary):
            return te.binary(e.op, self(e.a), self(e.b))
        if isinstance(e, te.Unary):
            return te.Unary(e.op, self(e.a))
        if isinstance(e, te.Select):
            return te.select(self(e.cond), self(e.t), self(e.f))
        if isinstance(e, te.Cast):
            return te.cast(e.dtype, self(e.a))
        if isinstance(e, BufLoad):
            return e
        raise ScheduleError(f"cannot lower {type(e).__name__} here")


def _extent(lp: Loop) -> te.Expr:
    if lp.tail is None:
        return te.Const(lp.extent, "int64")
    outer, factor, bound = lp.tail
    return te.minimum(te.Const(factor, "int64"), bound - outer * factor)


def _nest(loops: Sequence[Loop], body: Stmt) -> Stmt:
    for lp in reversed(loops):
        body = For(lp.var, _extent(lp), lp.kind, body)
    return body


def combine(combiner: str, acc: te.Expr, x: te.Expr) -> te.Expr:
    if combiner == "sum":
        return acc + x
    if combiner == "prod":
        return acc * x
    if combiner == "max":
        return te.maximum(acc, x)
    return te.minimum(acc, x)


def lower_stage(s: StageSchedule, bufs: dict[int, Buffer]) -> Stmt:
    s.check()
    t = s.tensor
    assert t.op is not None
    out = bufs[id(t)]
    conv = _Converter(bufs)
    out_index = flat_index(out, [s.value[ax.var] for ax in t.op.axes])
    body = t.op.body
    if not isinstance(body, te.Reduce):
        return _nest(s.leaves, Store(out, out_index, conv(te.substitute(body, s.value))))
    value = conv(te.substitute(body.body, s.value))
    first = next(i for i, lp in enumerate(s.leaves) if lp.origin == "reduce")
    outer, inner = s.leaves[:first], s.leaves[first:]
    inner_spatial = [lp for lp in inner if lp.origin == "spatial"]
    init = _nest(inner_spatial, Store(out, out_index, conv(te.substitute(body.init, s.value))))
    update = Store(out, out_index, combine(body.combiner, BufLoad(out, out_index), value))
    return _nest(outer, Seq([init, _nest(inner, update)]))


def lower_kernel(
    name: str,
    inputs: Sequence[te.Tensor],
    outputs: Sequence[te.Tensor],
    schedule: ScheduleFn,
) -> Kernel:
    """One kernel computing `outputs` from `inputs`; non-inlined intermediates become scratch."""
    bufs: dict[int, Buffer] = {}
    buffers: list[Buffer] = []

    def add(t: te.Tensor, role: str) -> None:
        b = Buffer(f"{role[0]}{len(buffers)}", t.dtype, t.shape, role)
        bufs[id(t)] = b
        buffers.append(b)

    for t in inputs:
        add(t, "input")
    for t in outputs:
        if id(t) in bufs:
            raise ScheduleError(f"output {t.name} is also an input; copy it explicitly")
        add(t, "output")
    stages = stages_of(outputs)
    for t in stages:
        assert t.op is not None
        if id(t) not in bufs and not t.op.inline:
            add(t, "scratch")
    for t in stages:
        for dep in te.tensors_read(t.op.body):  # type: ignore[union-attr]
            if dep.op is None and id(dep) not in bufs:
                raise ScheduleError(f"placeholder {dep.name} is not an input of kernel {name}")
    nests = [lower_stage(schedule(t), bufs) for t in stages if id(t) in bufs]
    return Kernel(name, buffers, nests)
