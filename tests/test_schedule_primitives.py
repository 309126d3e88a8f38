"""Schedule primitives on the loop IR: each one's loop structure and unchanged numerics."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import run_kernel

from lowering import te
from lowering.intrinsics import gemm_blocks
from lowering.loop_ir import Call, For, Kernel, Prefetch, Seq, Stmt, Store, format_kernel
from lowering.lower import lower_schedule
from lowering.schedule import Schedule, ScheduleError
from targets.cpu.codegen import ModuleBuilder
from targets.cpu.target import host_target

RNG = np.random.default_rng(0)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _matmul(m: int, k: int, n: int, transpose_b: bool = False):
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((n, k) if transpose_b else (k, n), "float32", "B")
    r = te.reduce_axis(k, "k")

    def body(i: te.Var, j: te.Var) -> te.Expr:
        rhs = b[j, r.var] if transpose_b else b[r.var, j]
        return te.reduce_sum(a[i, r.var] * rhs, [r])

    return a, b, te.compute((m, n), body, name="C")


def _walk(s: Stmt, depth: int = 0):
    """(depth, statement) of every statement, outermost first."""
    yield depth, s
    if isinstance(s, For):
        yield from _walk(s.body, depth + 1)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from _walk(x, depth)


def _loops(k: Kernel) -> list[tuple[int, str, str]]:
    """(depth, loop variable, kind) of every loop of the kernel."""
    return [(d, s.var.name, s.kind) for st in k.stages for d, s in _walk(st) if isinstance(s, For)]


def _stores(k: Kernel) -> list[tuple[int, str]]:
    """(depth, buffer name) of every store."""
    return [(d, s.buf.name) for st in k.stages for d, s in _walk(st) if isinstance(s, Store)]


def _buffer(k: Kernel, prefix: str):
    (b,) = [b for b in k.buffers if b.role == "scratch" and b.name.startswith(prefix)]
    return b


def _llvm(k: Kernel) -> str:
    mb = ModuleBuilder(host_target())
    mb.add_kernel(k)
    return mb.text()


# one-stage loop primitives -----------------------------------------------------------------

def test_split_reorder_tile_fuse():
    a = te.placeholder((37, 29), "float32", "A")
    c = te.compute((37, 29), lambda i, j: a[i, j] * 2.0 + 1.0, name="C")
    s = Schedule([c])
    i, j = s[c].leaves
    io, jo, ii, ji = s[c].tile(i, j, 8, 16)
    fused = s[c].fuse(io, jo)
    k = lower_schedule("k_tile", [a], [c], s)
    names = [(d, v) for d, v, _ in _loops(k)]
    assert names == [(0, fused.name), (1, ii.name), (2, ji.name)]
    assert fused.extent == 5 * 2 and ii.extent == 8 and ji.extent == 16
    text = format_kernel(k)
    assert "min(8, " in text and "min(16, " in text  # edge tiles of the non-divisible splits
    x = _rand(37, 29)
    (out,) = run_kernel(k, [x])
    np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)


def test_unroll_vectorize_parallel():
    a, b, c = _matmul(33, 20, 40)
    s = Schedule([c])
    i, j, r = s[c].leaves
    ro, ri = s[c].split(r, 4)
    s[c].reorder(i, ro, ri, j)
    s[c].parallel(i)
    s[c].unroll(ri)
    s[c].vectorize(j)
    k = lower_schedule("k_kinds", [a, b], [c], s)
    kinds = {v: kind for _, v, kind in _loops(k)}
    assert kinds[i.name] == "parallel" and kinds[ri.name] == "unroll"
    assert kinds[j.name] == "vectorize" and kinds[ro.name] == "serial"
    ir = _llvm(k)
    assert "@aotc_parallel_for" in ir.split("define i32 @k_kinds")[1]
    assert "llvm.loop.unroll.enable" in ir and "llvm.loop.vectorize.enable" in ir
    x, y = _rand(33, 20), _rand(20, 40)
    (out,) = run_kernel(k, [x, y])
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


# multi-stage primitives ----------------------------------------------------------------------

def test_compute_inline():
    a = te.placeholder((10, 12), "float32", "A")
    b = te.compute((10, 12), lambda i, j: te.unary("exp", a[i, j]), name="B")
    c = te.compute((10, 12), lambda i, j: b[i, j] + b[i, 11 - j], name="C")
    s = Schedule([c])
    k_separate = lower_schedule("k_sep", [a], [c], s)
    assert len(k_separate.stages) == 2 and any(b.role == "scratch" for b in k_separate.buffers)
    s.compute_inline(b)
    k = lower_schedule("k_inline", [a], [c], s)
    assert len(k.stages) == 1 and not any(b.role == "scratch" for b in k.buffers)
    assert format_kernel(k).count("exp(") == 2
    x = _rand(10, 12)
    (out,) = run_kernel(k, [x])
    np.testing.assert_allclose(out, np.exp(x) + np.exp(x[:, ::-1]), rtol=1e-5)
    with pytest.raises(ScheduleError, match="output"):
        s.compute_inline(c)


def test_compute_at_tile_region_with_halo():
    """A producer computed per output tile: a tile-sized buffer covering the tile plus the
    halo the stencil reads, clipped at the tensor's edges (37 x 29 is not a tile multiple)."""
    a = te.placeholder((37, 29), "float32", "A")
    p = te.compute((37, 29), lambda i, j: te.unary("exp", a[i, j]), name="P")

    def stencil(i: te.Var, j: te.Var) -> te.Expr:
        left = te.select(te.gt(j, 0), p[i, j - 1], te.const(0.0))
        right = te.select(te.lt(j, 28), p[i, j + 1], te.const(0.0))
        return left + p[i, j] + right

    c = te.compute((37, 29), stencil, name="C")
    s = Schedule([c])
    i, j = s[c].leaves
    io, jo, ii, ji = s[c].tile(i, j, 8, 8)
    s.compute_at(p, c, jo)
    k = lower_schedule("k_at", [a], [c], s)
    tile = _buffer(k, "s")
    assert tile.shape == (8, 10)  # 8 rows, 8 columns + one each side
    # the producer's store is inside the consumer's jo loop, before the consumer's own loops
    assert len(k.stages) == 1
    (depth_p,) = [d for d, name in _stores(k) if name == tile.name]
    assert depth_p == 4  # io, jo, then the producer's two loops
    x = _rand(37, 29)
    (out,) = run_kernel(k, [x])
    e = np.exp(x)
    want = e.copy()
    want[:, 1:] += e[:, :-1]
    want[:, :-1] += e[:, 1:]
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_compute_at_nested_with_producer_schedules_replayed():
    """P at Q's loop, Q at C's loop: each region inferred from the one around it; the
    producers' own splits are replayed on their (clipped) regions."""
    a = te.placeholder((50,), "float32", "A")
    p = te.compute((50,), lambda i: a[i] * 3.0, name="P")
    q = te.compute((49,), lambda i: p[i] + p[i + 1], name="Q")
    c = te.compute((48,), lambda i: q[i] * q[i + 1], name="C")
    s = Schedule([c])
    co, ci = s[c].split(s[c].leaves[0], 16)
    s.compute_at(q, c, co)
    qo, qi = s[q].split(s[q].leaves[0], 4)
    s[q].vectorize(qi)
    s.compute_at(p, q, qo)
    k = lower_schedule("k_nest", [a], [c], s)
    shapes = sorted(b.shape for b in k.buffers if b.role == "scratch")
    assert shapes == [(5,), (17,)]  # q: a 16-tile + 1; p: a 4-tile of q + 1
    kinds = [kind for _, _, kind in _loops(k)]
    assert kinds.count("vectorize") == 1 and len(kinds) == 5  # co, [qo, [p], qi], ci
    x = _rand(50)
    (out,) = run_kernel(k, [x])
    pp = x * 3
    qq = pp[:-1] + pp[1:]
    np.testing.assert_allclose(out, qq[:-1] * qq[1:], rtol=1e-5)


def test_compute_at_under_parallel_loop_gets_a_slot_per_iteration():
    a = te.placeholder((64, 48), "float32", "A")
    p = te.compute((64, 48), lambda i, j: a[i, j] * a[i, j], name="P")
    c = te.compute((64, 48), lambda i, j: p[i, j] + 1.0, name="C")
    s = Schedule([c])
    i, j = s[c].leaves
    io, jo, ii, ji = s[c].tile(i, j, 16, 16)
    s[c].parallel(io)
    s.compute_at(p, c, jo)
    k = lower_schedule("k_par", [a], [c], s)
    assert _buffer(k, "s").shape == (4, 16, 16)  # one 16 x 16 tile per parallel iteration
    x = _rand(64, 48)
    (out,) = run_kernel(k, [x])
    np.testing.assert_allclose(out, x * x + 1, rtol=1e-6)


def test_compute_at_rejects_a_producer_with_other_readers():
    a = te.placeholder((8,), "float32", "A")
    p = te.compute((8,), lambda i: a[i] + 1.0, name="P")
    q = te.compute((8,), lambda i: p[i] * 2.0, name="Q")
    c = te.compute((8,), lambda i: p[i] + q[i], name="C")
    s = Schedule([c])
    with pytest.raises(ScheduleError, match="not only by"):
        s.compute_at(p, c, s[c].leaves[0])


def test_cache_read_root_copy():
    a, b, c = _matmul(9, 7, 5)
    s = Schedule([c])
    ac = s.cache_read(a, [c])
    k = lower_schedule("k_cr", [a, b], [c], s)
    assert len(k.stages) == 2
    copy = _buffer(k, "s")
    assert copy.shape == (9, 7)
    assert f"{copy.name}[" in format_kernel(k).split("\n", 2)[2]
    assert s.attachment(ac) == "root"
    x, y = _rand(9, 7), _rand(7, 5)
    (out,) = run_kernel(k, [x, y])
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)


def test_cache_write_accumulates_in_a_tile():
    a, b, c = _matmul(21, 30, 19)
    s = Schedule([c])
    cc = s.cache_write(c)
    i, j = s[c].leaves
    io, jo, ii, ji = s[c].tile(i, j, 8, 8)
    s.compute_at(cc, c, jo)
    k = lower_schedule("k_cw", [a, b], [c], s)
    acc = _buffer(k, "s")
    assert acc.shape == (8, 8)
    out_name = [b_.name for b_ in k.buffers if b_.role == "output"][0]
    stores = _stores(k)
    assert (4, acc.name) in stores or (5, acc.name) in stores  # inside io, jo (+ the k loop)
    assert (4, out_name) in stores  # the copy-out of the tile
    x, y = _rand(21, 30), _rand(30, 19)
    (out,) = run_kernel(k, [x, y])
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


def test_rfactor_row_sum():
    x_t = te.placeholder((37, 100), "float32", "X")
    r = te.reduce_axis(100, "k")
    total = te.compute((37,), lambda i: te.reduce_sum(x_t[i, r.var], [r]), name="S")
    s = Schedule([total])
    i, kk = s[total].leaves
    ko, ki = s[total].split(kk, 16)
    rf = s.rfactor(total, ki)
    assert rf.shape == (37, 16)
    ri, rj, rko = s[rf].leaves
    assert (ri.origin, rj.origin, rko.origin) == ("spatial", "spatial", "reduce")
    s[rf].reorder(ri, rko, rj)
    s[rf].vectorize(rj)  # the factored loop is spatial now: it can be vectorised
    k = lower_schedule("k_rf", [x_t], [total], s)
    assert len(k.stages) == 2
    assert ("vectorize" in [kind for _, v, kind in _loops(k) if v == rj.name])
    assert _buffer(k, "s").shape == (37, 16)
    assert "select(lt(" in format_kernel(k)  # 100 = 6*16 + 4: the last chunk is masked
    x = _rand(37, 100)
    (out,) = run_kernel(k, [x])
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_pragma_prefetch():
    a, b, c = _matmul(16, 64, 32)
    s = Schedule([c])
    i, j, r = s[c].leaves
    ro, ri = s[c].split(r, 16)
    s[c].reorder(i, ro, ri, j)
    s[c].pragma(ro, "prefetch")
    k = lower_schedule("k_pf", [a, b], [c], s)
    pf = [(d, x) for st in k.stages for d, x in _walk(st) if isinstance(x, Prefetch)]
    assert len(pf) == 2 and all(d == 2 for d, _ in pf)  # first in ro's body: A and B
    text = format_kernel(k)
    assert text.count("prefetch(&i0[") == 1 and text.count("prefetch(&i1[") == 1
    assert "@llvm.prefetch.p0" in _llvm(k)
    x, y = _rand(16, 64), _rand(64, 32)
    (out,) = run_kernel(k, [x, y])
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
    with pytest.raises(ScheduleError, match="unknown pragma"):
        s[c].pragma(ro, "stream")


# tensorize ---------------------------------------------------------------------------------

def _block():
    """A register block narrower than the test's N (29), so there are full and edge tiles."""
    return next(b for b in gemm_blocks(host_target(), limit=100) if b.nv == 1)


def _gemm_schedule(a, b, c, pack: bool, parallel: bool = False, kc: int = 16):
    blk = _block()
    s = Schedule([c])
    if pack:
        ap = s.cache_read(a, [c])
        bp = s.cache_read(b, [c])
    i, j, r = s[c].leaves
    io, jo, ii, ji = s[c].tile(i, j, blk.mr, blk.nr)
    ro, ri = s[c].split(r, kc)
    s[c].reorder(io, jo, ro, ii, ji, ri)
    if parallel:
        s[c].parallel(io)
    if pack:
        s.compute_at(ap, c, ro)
        s.compute_at(bp, c, ro)
    s[c].tensorize([ii, ji, ri], blk)
    return s, blk


@pytest.mark.parametrize("pack,parallel", [(True, False), (False, False), (True, True)])
def test_tensorize_gemm_awkward_sizes(pack, parallel):
    a, b, c = _matmul(37, 53, 29)
    s, blk = _gemm_schedule(a, b, c, pack, parallel)
    k = lower_schedule("k_gemm", [a, b], [c], s)
    calls = [x for st in k.stages for _, x in _walk(st) if isinstance(x, Call)]
    assert len(calls) == 1 and calls[0].func == blk.routine
    assert len(_loops(k)) == 3 + (4 if pack else 0)  # io, jo, ko (+ two 2-deep packing nests)
    if pack:
        scratch = [x.shape for x in k.buffers if x.role == "scratch"]
        slots = (-(-37 // blk.mr),) if parallel else ()
        assert blk.nr < 29 and blk.mr < 37
        assert scratch == [slots + (blk.mr, 16), slots + (16, blk.nr)]
        # packed panels: A rows kc apart, B rows nr apart
        assert calls[0].args[1].value == 16 and calls[0].args[4].value == blk.nr
    else:
        assert calls[0].args[1].value == 53 and calls[0].args[4].value == 29
    x, y = _rand(37, 53), _rand(53, 29)
    (out,) = run_kernel(k, [x, y])
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


def test_tensorize_with_nonzero_init():
    a = te.placeholder((20, 24), "float32", "A")
    b = te.placeholder((24, 18), "float32", "B")
    bias = te.placeholder((18,), "float32", "bias")
    r = te.reduce_axis(24, "k")
    c = te.compute((20, 18), lambda i, j: te.reduce("sum", a[i, r.var] * b[r.var, j], [r],
                                                    init=bias[j]), name="C")
    blk = _block()
    s = Schedule([c])
    i, j, kk = s[c].leaves
    io, jo, ii, ji = s[c].tile(i, j, blk.mr, blk.nr)
    s[c].tensorize([ii, ji, kk], blk)
    k = lower_schedule("k_bias", [a, b, bias], [c], s)
    assert any(isinstance(x, Call) for st in k.stages for _, x in _walk(st))
    x, y, z = _rand(20, 24), _rand(24, 18), _rand(18)
    (out,) = run_kernel(k, [x, y, z])
    np.testing.assert_allclose(out, x @ y + z, rtol=1e-4, atol=1e-4)


def test_tensorize_rejects_what_does_not_match():
    blk = _block()
    # B read transposed: not contiguous in the n loop
    a, b, c = _matmul(8, 8, 16, transpose_b=True)
    s = Schedule([c])
    i, j, r = s[c].leaves
    s[c].tensorize([i, j, r], blk)
    with pytest.raises(ScheduleError, match="no GEMM role assignment fits"):
        lower_schedule("k_bad", [a, b], [c], s)
    # not a product of two loads
    a2 = te.placeholder((8, 8), "float32", "A")
    r2 = te.reduce_axis(8, "k")
    c2 = te.compute((8, 16), lambda i, j: te.reduce_sum(a2[i, r2.var] + 1.0, [r2]), name="C")
    s2 = Schedule([c2])
    i2, j2, k2 = s2[c2].leaves
    s2[c2].tensorize([i2, j2, k2], blk)
    with pytest.raises(ScheduleError, match="product of two loads"):
        lower_schedule("k_bad2", [a2], [c2], s2)
    # loops that are not the innermost ones
    a3, b3, c3 = _matmul(blk.mr + 1, 8, 16)
    s3 = Schedule([c3])
    i3, j3, k3 = s3[c3].leaves
    with pytest.raises(ScheduleError, match="innermost"):
        s3[c3].tensorize([i3, j3], blk)
    # a tile larger than the register block
    s3[c3].tensorize([i3, j3, k3], blk)
    with pytest.raises(ScheduleError, match="exceeds"):
        lower_schedule("k_bad3", [a3, b3], [c3], s3)
