"""Einsum's equation read into labels: one label per operand axis, the output's labels, and
each label's extent.

An ellipsis stands for the axes an operand has beyond its letters; they are named by their
position from the right (".0" the last), so that ellipses of different lengths line up as
numpy broadcasting does. Without "->" the output is the ellipsis, then the letters used once,
sorted (ASCII: upper case first), numpy's rule, which ONNX's reference follows. A label's
extent is the one its axes share; an axis of extent 1 broadcasts against a longer one.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

LETTERS = frozenset(string.ascii_letters)


class EquationError(ValueError):
    """The equation does not fit the operands (the operator turns it into the node's error)."""


@dataclass(frozen=True)
class Spec:
    inputs: tuple[tuple[str, ...], ...]  # each operand axis's label
    output: tuple[str, ...]
    sizes: dict[str, int]


def _letters(term: str, where: str) -> list[str]:
    """A term's labels, the ellipsis as one '...' entry."""
    if term.count("...") > 1:
        raise EquationError(f"{where} has more than one ellipsis")
    out: list[str] = []
    head, dots, tail = term.partition("...")
    for part, last in ((head, not dots), (tail, True)):
        for ch in part:
            if ch not in LETTERS:
                raise EquationError(f"{where}: '{ch}' is not a label (letters a-z, A-Z)")
            out.append(ch)
        if not last:
            out.append("...")
    return out


def _expand(labels: list[str], rank: int, where: str) -> tuple[str, ...]:
    explicit = [lab for lab in labels if lab != "..."]
    extra = rank - len(explicit)
    if extra < 0 or (extra > 0 and "..." not in labels):
        raise EquationError(f"{where} names {len(explicit)} axes, the operand has {rank}")
    if "..." not in labels:
        return tuple(labels)
    at = labels.index("...")
    dots = [f".{extra - 1 - d}" for d in range(extra)]
    return (*labels[:at], *dots, *labels[at + 1 :])


def parse(equation: str, shapes: Sequence[Sequence[int]]) -> Spec:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise EquationError(f"the equation has {len(terms)} operands, the node {len(shapes)}")
    inputs = tuple(_expand(_letters(t, f"operand {i} '{t}'"), len(s), f"operand {i} '{t}'")
                   for i, (t, s) in enumerate(zip(terms, shapes, strict=True)))
    sizes: dict[str, int] = {}
    for labels, shape in zip(inputs, shapes, strict=True):
        for lab, n in zip(labels, shape, strict=True):
            have = sizes.get(lab, 1)
            if n != 1 and have not in (1, n):
                raise EquationError(f"label '{lab}' has extents {have} and {n}")
            sizes[lab] = max(have, n) if lab in sizes else n
    dots = sorted((lab for lab in sizes if lab.startswith(".")), key=lambda s: -int(s[1:]))
    if arrow:
        out = _letters(rhs, f"output '{rhs}'")
        if dots and "..." not in out:
            raise EquationError("the output leaves out the operands' ellipsis axes")
        output = tuple(lab for o in out for lab in (dots if o == "..." else [o]))
        if len(set(output)) != len(output):
            raise EquationError(f"output '{rhs}' repeats a label")
        unknown = [lab for lab in output if lab not in sizes]
        if unknown:
            raise EquationError(f"output label '{unknown[0]}' is not in any operand")
    else:
        counts = Counter(lab for labels in inputs for lab in labels)
        output = (*dots, *sorted(lab for lab, c in counts.items()
                                 if c == 1 and not lab.startswith(".")))
    return Spec(inputs, output, sizes)
