"""Integer index expressions as affine forms: `c0 + sum(coef * atom)`.

Atoms are loop variables and the quotients/remainders `x // c`, `x % c` by constants. The one
rewrite that matters: `c * (x // c) + x % c == x`, which undoes the split of a flattened index
into the axes of a tensor (im2col panels, fused loops), so that an access through a flattened
index is recognised as contiguous and costs one add instead of a division per element.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lowering import te


@dataclass
class Affine:
    const: int = 0
    terms: dict[str, tuple[te.Expr, int]] = field(default_factory=dict)  # key -> (atom, coef)

    def add(self, other: Affine, scale: int = 1) -> None:
        self.const += other.const * scale
        for k, (atom, c) in other.terms.items():
            prev = self.terms.get(k, (atom, 0))[1]
            if prev + c * scale:
                self.terms[k] = (atom, prev + c * scale)
            else:
                self.terms.pop(k, None)

    def coefficient(self, v: te.Var) -> int:
        """Coefficient of variable `v` (0 if absent). Atoms that merely contain `v` (a
        quotient of it) make the form non-affine in `v`: see `depends_only_linearly`."""
        return self.terms.get(_key(v), (v, 0))[1]

    def depends_only_linearly(self, v: te.Var) -> bool:
        return all(atom is v or not te.mentions(atom, v) for atom, _ in self.terms.values())

    def to_expr(self) -> te.Expr:
        out: te.Expr = te.Const(self.const, "int64")
        for atom, c in self.terms.values():
            out = out + (atom if c == 1 else atom * c)
        return out


def _key(e: te.Expr) -> str:
    return f"{type(e).__name__}:{id(e)}" if isinstance(e, te.Var) else repr(e)


def as_affine(e: te.Expr) -> Affine | None:
    """The affine form of an int64 index expression, or None when it is not affine."""
    if isinstance(e, te.Const):
        return Affine(int(e.value))
    if isinstance(e, te.Var):
        return Affine(0, {_key(e): (e, 1)})
    if not isinstance(e, te.Binary):
        return None
    if e.op in ("add", "sub"):
        a, b = as_affine(e.a), as_affine(e.b)
        if a is None or b is None:
            return None
        a.add(b, 1 if e.op == "add" else -1)
        return a
    if e.op == "mul":
        a, b = as_affine(e.a), as_affine(e.b)
        if a is None or b is None:
            return None
        if not b.terms:
            a, b = b, a
        if a.terms:
            return None  # product of two variables
        out = Affine()
        out.add(b, a.const)
        return out
    if e.op in ("floordiv", "mod") and isinstance(e.b, te.Const) and int(e.b.value) > 0:
        inner = as_affine(e.a)
        if inner is None:
            return None
        c = int(e.b.value)
        if not inner.terms:
            return Affine(inner.const // c if e.op == "floordiv" else inner.const % c)
        atom = te.binary(e.op, inner.to_expr(), e.b)
        return Affine(0, {_key(atom): (atom, 1)})
    return None


def _fold_divmod(f: Affine) -> Affine:
    """Replace `c*k*(x // c) + k*(x % c)` by `k*x` wherever both appear."""
    changed = True
    while changed:
        changed = False
        for key, (atom, coef) in list(f.terms.items()):
            if not (isinstance(atom, te.Binary) and atom.op == "mod"):
                continue
            c = int(atom.b.value)  # type: ignore[attr-defined]
            qkey = _key(te.binary("floordiv", atom.a, atom.b))
            q = f.terms.get(qkey)
            if q is None or q[1] != coef * c:
                continue
            inner = as_affine(atom.a)
            assert inner is not None
            del f.terms[key]
            del f.terms[qkey]
            f.add(inner, coef)
            changed = True
            break
    return f


def normalize(e: te.Expr) -> Affine | None:
    f = as_affine(e)
    return None if f is None else _fold_divmod(f)


def simplify_index(e: te.Expr) -> te.Expr:
    """`e` rebuilt from its folded affine form; unchanged when it is not affine."""
    f = normalize(e)
    return e if f is None else f.to_expr()


def interval(e: te.Expr, ranges: dict[te.Var, tuple[int, int]]) -> tuple[int, int] | None:
    """Bounds [lo, hi] of an integer index expression over the loop variables' ranges."""
    if isinstance(e, te.Const):
        return (int(e.value), int(e.value))
    if isinstance(e, te.DimVar):  # a run-time dimension: its declared range
        return ranges.get(e, (e.lo, e.hi))
    if isinstance(e, te.Var):
        return ranges.get(e)
    if not isinstance(e, te.Binary) or e.op not in ("add", "sub", "mul", "min", "max",
                                                      "floordiv", "mod"):
        return None
    a, b = interval(e.a, ranges), interval(e.b, ranges)
    if a is None or b is None:
        return None
    if e.op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if e.op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if e.op == "mul":
        c = [x * y for x in a for y in b]
        return (min(c), max(c))
    if e.op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if e.op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if b[0] != b[1] or b[0] <= 0:
        return None
    if e.op == "floordiv":
        return (a[0] // b[0], a[1] // b[0])
    return (0, b[0] - 1) if a[0] < 0 or a[1] >= b[0] else a


_EVAL_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
    "mod": np.mod, "min": np.minimum, "max": np.maximum, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
}


def evaluate(e: te.Expr, env: dict[te.Var, object]):  # -> np.ndarray | np.generic | int
    """Value of an integer/boolean index expression with its variables bound to integers or
    numpy arrays (elementwise, broadcasting). A select with a scalar condition evaluates only
    the side it takes. Raises KeyError for an unbound variable, ValueError for anything that
    is not index arithmetic."""
    if isinstance(e, te.Var):
        return env[e]
    if isinstance(e, te.Const):
        return e.value
    if isinstance(e, te.Binary):
        if e.op not in _EVAL_OPS:
            raise ValueError(e.op)
        return _EVAL_OPS[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, te.Unary) and e.op == "not":
        return np.logical_not(evaluate(e.a, env))
    if isinstance(e, te.Select):
        cond = evaluate(e.cond, env)
        if np.ndim(cond) == 0:
            return evaluate(e.t if cond else e.f, env)
        return np.where(cond, evaluate(e.t, env), evaluate(e.f, env))
    raise ValueError(type(e).__name__)
