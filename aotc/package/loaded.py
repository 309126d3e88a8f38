"""A built bundle's shared library loaded with ctypes: create / run / destroy from Python.

ctypes releases the GIL during each C call, so two LoadedBundle objects (two contexts) can run at
the same time on two Python threads.
"""

from __future__ import annotations

import ctypes
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from aotc.package.program import DTYPES, TensorInfo


class BundleError(RuntimeError):
    """A bundle function returned a non-zero status."""

    def __init__(self, function: str, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"{function} failed: {message} (status {status})")


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("dtype_name", ctypes.c_char_p),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("num_bytes", ctypes.c_uint64),
    ]


class ModelDesc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("num_inputs", ctypes.c_int32),
        ("inputs", ctypes.POINTER(TensorDesc)),
        ("num_outputs", ctypes.c_int32),
        ("outputs", ctypes.POINTER(TensorDesc)),
        ("workspace_size", ctypes.c_uint64),
        ("workspace_align", ctypes.c_uint64),
        ("triple", ctypes.c_char_p),
        ("num_dims", ctypes.c_int32),
        ("dims_min", ctypes.POINTER(ctypes.c_int64)),
        ("dims_max", ctypes.POINTER(ctypes.c_int64)),
        ("input_dim_axes", ctypes.POINTER(ctypes.c_int32)),
        ("output_dim_axes", ctypes.POINTER(ctypes.c_int32)),
        ("output_computed_axes", ctypes.POINTER(ctypes.c_int32)),
    ]


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype | str, align: int = 64) -> np.ndarray:
    """An uninitialised C-order array whose data starts on an `align`-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _tensors(descs: ctypes._Pointer, count: int, dim_axes: ctypes._Pointer | None = None
             ) -> list[TensorInfo]:
    out = []
    for i in range(count):
        d = descs[i]
        shape = tuple(int(d.shape[k]) for k in range(d.rank))
        axis = int(dim_axes[i]) if dim_axes else -1
        out.append(TensorInfo(d.name.decode(), d.dtype_name.decode(), shape,
                              (axis,) if axis >= 0 else ()))
    return out


def _pointer_array(arrays: list[np.ndarray]) -> ctypes.Array:
    return (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])


class LoadedBundle:
    """libNAME.so of a bundle (build it with build_bundle(..., target="shared")) and one context."""

    def __init__(self, bundle_dir: Path) -> None:
        bundle_dir = Path(bundle_dir)
        self.name: str = json.loads((bundle_dir / "aotc_bundle.json").read_text())["name"]
        path = bundle_dir / f"lib{self.name}.so"
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: build the bundle with target='shared'")
        self.lib = ctypes.CDLL(str(path.absolute()))
        self._ctx = ctypes.c_void_p()
        n, lib = self.name, self.lib
        self._create = lib[f"{n}_create"]
        self._create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        self._create.restype = ctypes.c_int
        self._run_context = lib[f"{n}_run_context"]
        self._run_context.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._run_context.restype = ctypes.c_int
        self._run = lib[f"{n}_run"]
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._run.restype = ctypes.c_int
        self._destroy = lib[f"{n}_destroy"]
        self._destroy.argtypes = [ctypes.c_void_p]
        self._destroy.restype = None
        self._num_threads = lib[f"{n}_context_num_threads"]
        self._num_threads.argtypes = [ctypes.c_void_p]
        self._num_threads.restype = ctypes.c_int
        self._message = lib[f"{n}_status_message"]
        self._message.argtypes = [ctypes.c_int]
        self._message.restype = ctypes.c_char_p
        describe = lib[f"{n}_describe"]
        describe.restype = ctypes.POINTER(ModelDesc)
        desc = describe().contents
        dynamic = desc.num_dims > 0
        self.inputs = _tensors(desc.inputs, desc.num_inputs,
                               desc.input_dim_axes if dynamic else None)
        self.outputs = _tensors(desc.outputs, desc.num_outputs,
                                desc.output_dim_axes if dynamic else None)
        # the run-time dimension's range (a model with one), else None
        self.dim_range = (int(desc.dims_min[0]), int(desc.dims_max[0])) if dynamic else None
        if dynamic:
            self._run_context_dims = lib[f"{n}_run_context_dims"]
            self._run_context_dims.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_void_p]
            self._run_context_dims.restype = ctypes.c_int
        # outputs whose length the run computes: their shape comes from NAME_output_shape
        self.computed = bool(desc.output_computed_axes)
        self._output_shape = self._context_output_shape = None
        if self.computed:
            self.outputs = [replace(t, computed_axis=int(desc.output_computed_axes[i]))
                            for i, t in enumerate(self.outputs)]
            shape_argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64)]
            self._output_shape = lib[f"{n}_output_shape"]
            self._context_output_shape = lib[f"{n}_context_output_shape"]
            for fn in (self._output_shape, self._context_output_shape):
                fn.argtypes = shape_argtypes
                fn.restype = ctypes.c_int
        self.workspace_size = int(desc.workspace_size)
        self.workspace_align = int(desc.workspace_align)

    # -- raw access, for tests of the C API's checks --
    def status_message(self, status: int) -> str:
        return self._message(status).decode()

    def run_raw(self, inputs: object, outputs: object, workspace: object) -> int:
        """NAME_run with raw pointers (ctypes arrays, ints or None); returns the status."""
        return int(self._run(inputs, outputs, workspace))

    def _check(self, function: str, status: int) -> None:
        if status != 0:
            raise BundleError(function, status, self.status_message(status))

    def _prepare(self, inputs: list[np.ndarray], length: int | None = None
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        if len(inputs) != len(self.inputs):
            raise ValueError(f"{self.name}: expected {len(self.inputs)} inputs, got {len(inputs)}")
        ins = []
        for x, info in zip(inputs, self.inputs, strict=True):
            x = np.asarray(x, order="C")  # (ascontiguousarray makes a 0-d array 1-d)
            want = np.dtype(DTYPES[info.dtype][1])
            shape = info.shape if length is None else info.at_length(length)
            if x.dtype != want or x.shape != shape:
                raise ValueError(
                    f"{self.name}: input '{info.name}' must be {info.dtype}{list(info.shape)}, "
                    f"got {x.dtype}{list(x.shape)}"
                )
            ins.append(x)
        outs = [aligned_empty(t.shape, DTYPES[t.dtype][1]) for t in self.outputs]
        return ins, outs

    # -- the context API --
    def create(self, threads: int = 0) -> None:
        if self._ctx:
            raise RuntimeError(f"{self.name}: a context already exists")
        self._check(f"{self.name}_create", self._create(ctypes.byref(self._ctx), threads))

    @property
    def num_threads(self) -> int:
        return int(self._num_threads(self._ctx))

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Runs the model with this object's context (create() first)."""
        if not self._ctx:
            raise RuntimeError(f"{self.name}: call create() first")
        ins, outs = self._prepare(inputs)
        status = self._run_context(self._ctx, _pointer_array(ins), _pointer_array(outs))
        self._check(f"{self.name}_run_context", status)
        return self._at_computed_lengths(outs, self._context_output_shape, self._ctx)

    def run_at(self, inputs: list[np.ndarray], length: int) -> list[np.ndarray]:
        """Runs a model with a run-time dimension at `length` (NAME_run_context_dims) with this
        object's context; inputs and outputs are dense at that length."""
        if not self._ctx:
            raise RuntimeError(f"{self.name}: call create() first")
        ins, outs = self._prepare(inputs, length)
        status = self.run_dims_raw(length, ins, outs)
        self._check(f"{self.name}_run_context_dims", status)
        return [o.reshape(-1)[:math.prod(t.at_length(length))].reshape(t.at_length(length))
                for o, t in zip(outs, self.outputs, strict=True)]

    def run_dims_raw(self, length: int, ins: list[np.ndarray], outs: list[np.ndarray]) -> int:
        """NAME_run_context_dims at `length` on arrays (no checks here); returns the status."""
        dims = (ctypes.c_int64 * 1)(length)
        return int(self._run_context_dims(self._ctx, dims, _pointer_array(ins),
                                          _pointer_array(outs)))

    def run_single(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Runs the model through NAME_run (single-threaded, a fresh aligned workspace)."""
        ins, outs = self._prepare(inputs)
        workspace = aligned_empty((max(1, self.workspace_size),), np.uint8, self.workspace_align)
        status = self._run(_pointer_array(ins), _pointer_array(outs), workspace.ctypes.data)
        self._check(f"{self.name}_run", status)
        return self._at_computed_lengths(outs, self._output_shape, workspace.ctypes.data)

    def _at_computed_lengths(self, outs: list[np.ndarray], output_shape: object,
                             where: object) -> list[np.ndarray]:
        """The outputs at the shapes the run reports (`output_shape`: NAME_output_shape or
        NAME_context_output_shape, given `where` the run ran): an output whose length the
        run computed is the dense prefix of its buffer."""
        if not self.computed:
            return outs
        got = []
        for i, (o, t) in enumerate(zip(outs, self.outputs, strict=True)):
            if t.computed_axis < 0:
                got.append(o)
                continue
            shape = (ctypes.c_int64 * max(1, len(t.shape)))()
            self._check(f"{self.name}_output_shape", output_shape(where, i, shape))  # type: ignore[operator]
            dims = tuple(int(shape[k]) for k in range(len(t.shape)))
            got.append(o.reshape(-1)[:math.prod(dims)].reshape(dims))
        return got

    def destroy(self) -> None:
        if self._ctx:
            self._destroy(self._ctx)
            self._ctx = ctypes.c_void_p()

    def __enter__(self) -> LoadedBundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __del__(self) -> None:
        try:
            self.destroy()
        except Exception:  # interpreter shutdown
            pass
