"""The compiled model as plain data: what the packager turns into a bundle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import ml_dtypes  # noqa: F401 (numpy's dtypes "bfloat16", "float8_e4m3fn", "int4", ...)
import numpy as np

if TYPE_CHECKING:
    from targets.gpu.codegen import GpuModule

Storage = Literal["arena", "weight", "input", "output"]


@dataclass(frozen=True)
class RunTimeDim:
    """A dimension known only at run time: `name` (the input axis that gave it), lo..hi."""

    name: str
    lo: int
    hi: int

# ONNX-facing dtype names used everywhere in the package layer, with their C and numpy forms.
DTYPES: dict[str, tuple[str, str]] = {
    # name: (C type, numpy dtype str)
    "float32": ("float", "<f4"),
    "float64": ("double", "<f8"),
    "float16": ("uint16_t", "<f2"),  # IEEE half: C99 has no type for it, its bits are a uint16_t
    "bfloat16": ("uint16_t", "bfloat16"),  # ml_dtypes' type (.npy files say '<V2')
    "int64": ("int64_t", "<i8"),
    "int32": ("int32_t", "<i4"),
    "int16": ("int16_t", "<i2"),
    "int8": ("int8_t", "|i1"),
    "uint64": ("uint64_t", "<u8"),
    "uint32": ("uint32_t", "<u4"),
    "uint16": ("uint16_t", "<u2"),
    "uint8": ("uint8_t", "|u1"),
    "bool": ("uint8_t", "|b1"),
    # One byte per element, ml_dtypes' layout (ONNX's raw data packs 4- and 2-bit values two
    # and four to a byte; aotc keeps one a byte so kernels address elements as bytes): an
    # 8-bit float's code; a 4-bit float's or 4-/2-bit integer's bits in the byte's low bits
    # (the high bits are written 0 and ignored when read). .npy files say '<V1' ('<f1' for
    # float8_e5m2), as ml_dtypes saves them.
    "float8_e4m3fn": ("uint8_t", "float8_e4m3fn"),
    "float8_e4m3fnuz": ("uint8_t", "float8_e4m3fnuz"),
    "float8_e5m2": ("uint8_t", "float8_e5m2"),
    "float8_e5m2fnuz": ("uint8_t", "float8_e5m2fnuz"),
    "float8_e8m0fnu": ("uint8_t", "float8_e8m0fnu"),
    "float4_e2m1fn": ("uint8_t", "float4_e2m1fn"),
    "int4": ("int8_t", "int4"),
    "uint4": ("uint8_t", "uint4"),
    "int2": ("int8_t", "int2"),
    "uint2": ("uint8_t", "uint2"),
}


def dtype_size(dtype: str) -> int:
    return np.dtype(DTYPES[dtype][1]).itemsize


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # a key of DTYPES
    shape: tuple[int, ...]  # at the bound where an axis follows the run-time dimension
    dyn_axes: tuple[int, ...] = ()  # the axes that follow it (the first longer than 1)
    # an output whose length the data decides (aotc/frontend/computed_lengths.py): the axis
    # (-1: none; `shape` holds its bound) and the arena offset of the int64 the run stores
    # the length in; the output is dense at that length, a prefix of its buffer
    computed_axis: int = -1
    length_offset: int = -1

    def at_length(self, n: int) -> tuple[int, ...]:
        """The shape when the run-time dimension is n."""
        return tuple(n if i in self.dyn_axes else d for i, d in enumerate(self.shape))

    def with_computed_length(self, n: int) -> tuple[int, ...]:
        """The shape when the run computed the length n (the shape itself without one)."""
        return tuple(n if i == self.computed_axis else d for i, d in enumerate(self.shape))

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * dtype_size(self.dtype)


@dataclass(frozen=True)
class BufferRef:
    """Where a kernel argument lives. offset is bytes for arena/weight, an index for input/output.

    Inside a `Loop` a reference may move with the iteration i of the loop at depth `loop`
    (0: outermost): `stride` bytes per iteration (a scan slice; negative walks backwards from
    the last slice, `shift` bytes after the start), or, when `odd_offset` is set, the arena
    offset `odd_offset` instead of `offset` on odd iterations (a carried value's two buffers,
    written and read in turn)."""

    storage: Storage
    offset: int
    loop: int = -1
    stride: int = 0
    odd_offset: int | None = None
    shift: int = 0

    @property
    def moves(self) -> bool:
        return self.loop >= 0


@dataclass(frozen=True)
class Step:
    kernel: str  # symbol of the kernel function in the kernel object
    args: tuple[BufferRef, ...]
    node: str  # the ONNX node (or fused region) it computes, for messages and profiles
    flops: float = 0.0  # floating-point operations of a convolution or matrix product, for profiles


@dataclass
class Loop:
    """Run `body` up to `trip_count` times (see ARCHITECTURE.md, control flow). `cond_in`, a
    bool read before the first iteration, and `cond_out`, read after each, end it early when
    false (None: always true). After a loop that ran an odd number of iterations,
    `on_odd_exit` runs: copies that bring the carried values home to their even buffers."""

    trip_count: int
    body: list[Item]
    node: str
    cond_in: BufferRef | None = None
    cond_out: BufferRef | None = None
    on_odd_exit: list[Step] = field(default_factory=list)
    depth: int = 0  # loops around it: what its body's moving references name as their `loop`


@dataclass
class Branch:
    """Run `then` when the bool at `cond` is true, else `otherwise` (a run-time If)."""

    cond: BufferRef
    then: list[Item]
    otherwise: list[Item]
    node: str


@dataclass(frozen=True)
class Check:
    """Stop the run with AOTC_ERR_INPUT_VALUE when the bool at `cond` is false: a parameter
    given as an input that the compiled kernels took as fixed (its value pinned by the
    model's declared shapes, lowering/ops/pinned.py) holds another value at run time.
    `what` says which value it had to be, for messages and the bundle's header."""

    cond: BufferRef
    node: str
    what: str


Item = Step | Loop | Branch | Check


def flat_items(items: list[Item]) -> list[Item]:
    """Every item of `items` and of the loops and branches in them, in table order."""
    out: list[Item] = []
    for item in items:
        out.append(item)
        if isinstance(item, Loop):
            out += flat_items(item.body) + list(item.on_odd_exit)
        elif isinstance(item, Branch):
            out += flat_items(item.then) + flat_items(item.otherwise)
    return out


def kernel_steps(items: list[Item]) -> list[Step]:
    """Every kernel step of `items`, loops' and branches' included, in table order."""
    return [item for item in flat_items(items) if isinstance(item, Step)]


@dataclass
class Program:
    name: str  # C identifier prefix of every public symbol
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    steps: list[Item]  # kernel steps, and loops and branches holding theirs
    arena_size: int
    arena_lower_bound: int
    arena_no_reuse: int
    weights: bytes  # 64-byte aligned blob; BufferRef("weight", off) points into it
    kernel_object: bytes
    kernel_ll: str
    triple: str
    cpu: str
    cpu_features: list[str] = field(default_factory=list)  # checked at create (x86: avx2, ...)
    num_threads: int = 0  # compile-time default; 0 = all online cores
    # dimensions left symbolic (at most one for now): kernels read its value from `dims`
    dims: list[RunTimeDim] = field(default_factory=list)
    stats: dict[str, object] = field(default_factory=dict)
    # GPU targets: the kernels' source and each kernel's launches (kernel_ll holds the same
    # source, kernel_object CUDA's PTX); None for a CPU program
    gpu: GpuModule | None = None
    # `--allow-tf32` as a GPU target took it: float32 products may round their operands to
    # tf32 on tensor cores (`gpu.mma` names the instructions the kernels do call)
    allow_tf32: bool = False
