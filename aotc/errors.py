"""User-facing errors: one class, carrying the file, node and operator it concerns."""

from __future__ import annotations


class AotcError(Exception):
    """A problem with the user's input (model, flags, output path).

    The CLI prints it as one message and exits with status 2; it never shows a traceback.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        node: str | None = None,
        op: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.node = node
        self.op = op
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file))
        if self.node is not None:
            where.append(f"node '{self.node}'")
        if self.op:
            where.append(f"({self.op})")
        text = (": ".join([" ".join(where), self.message]) if where else self.message)
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class UnsupportedOperators(AotcError):
    """Every node of a model whose operator aotc cannot compile, listed at once."""

    def __init__(self, file: str | None, nodes: list[tuple[str, str]]) -> None:
        self.nodes = nodes
        lines = [f"  - node '{name}' ({op})" for name, op in nodes]
        ops = sorted({op for _, op in nodes})
        super().__init__(
            f"{len(nodes)} node(s) use operators aotc does not support ({', '.join(ops)}):\n"
            + "\n".join(lines),
            file=file,
            hint="run `aotc inspect` to see the model's operators",
        )


class CompilerBug(RuntimeError):
    """An unexpected exception inside the compiler, with the node it was compiling: a bug in
    aotc (the CLI reports it as an internal error), never a user's mistake."""
