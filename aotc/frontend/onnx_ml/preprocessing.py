"""Element-wise and per-row ai.onnx.ml operators: Scaler, Normalizer, Binarizer,
ArrayFeatureExtractor, LabelEncoder (numeric keys and values), Imputer, OneHotEncoder,
FeatureVectorizer."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from aotc.frontend.onnx_ml.attrs import Attrs
from aotc.frontend.onnx_ml.body import Body


def as_float(b: Body, x: str, dtype: ir.DataType | None) -> str:
    """`x` as float32 (what these operators compute and return for every numeric input)."""
    return x if dtype == ir.DataType.FLOAT else b.op("Cast", x, to=1)


def scaler(b: Body, attrs: Attrs, dtypes) -> list[str]:
    x = as_float(b, b.inputs[0], dtypes[0])
    offset = attrs.array("offset", np.float32, (0.0,))
    scale = attrs.array("scale", np.float32, (1.0,))
    return [b.op("Mul", b.op("Sub", x, b.const(offset)), b.const(scale))]


def normalizer(b: Body, attrs: Attrs, dtypes) -> list[str]:
    x = as_float(b, b.inputs[0], dtypes[0])
    norm = attrs.get("norm", "MAX")
    axis = b.ints(-1)
    if norm == "MAX":
        by = b.op("ReduceMax", x, axis, keepdims=1)
    elif norm == "L1":
        by = b.op("ReduceSum", b.op("Abs", x), axis, keepdims=1)
    elif norm == "L2":
        by = b.op("Sqrt", b.op("ReduceSumSquare", x, axis, keepdims=1))
    else:
        raise attrs.refuse(f"norm {norm} is not one of MAX, L1, L2")
    return [b.op("Div", x, by)]


def binarizer(b: Body, attrs: Attrs, dtypes) -> list[str]:
    x = b.inputs[0]
    np_type = ir.DataType(dtypes[0]).numpy()
    above = b.op("Greater", x, b.const(attrs.get("threshold", 0.0), np_type))
    return [b.op("Cast", above, to=int(dtypes[0]))]


def array_feature_extractor(b: Body, attrs: Attrs, dtypes) -> list[str]:
    """X[..., indices] with the indices flattened; a 1-D X gives [1, k] (as onnxruntime)."""
    x, indices = b.inputs
    flat = b.op("Reshape", indices, b.ints(-1))
    picked = b.op("Gather", x, flat, axis=-1)
    rank = attrs.node.inputs[0].shape.rank() if attrs.node.inputs[0].shape is not None else None
    if rank == 1:
        picked = b.op("Unsqueeze", picked, b.ints(0))
    elif rank is None:
        raise attrs.refuse("the rank of input X is not known")
    return [picked]


def _label_table(attrs: Attrs):
    """(keys, values, default) as arrays; the tensor forms of ai.onnx.ml opset 4 included."""
    attrs.no_strings("keys_strings", "values_strings")
    keys = attrs.get("keys_tensor")
    values = attrs.get("values_tensor")
    default = attrs.get("default_tensor")
    if keys is not None and keys.dtype.kind in "OSU" or \
            values is not None and values.dtype.kind in "OSU":
        raise attrs.refuse("string keys or values are not supported (aotc compiles numeric "
                           "tensors)")
    if keys is None:
        for name, dtype in (("keys_int64s", np.int64), ("keys_floats", np.float32)):
            if attrs.has(name):
                keys = attrs.array(name, dtype)
    if values is None:
        for name, dtype, default_name in (("values_int64s", np.int64, "default_int64"),
                                          ("values_floats", np.float32, "default_float")):
            if attrs.has(name):
                values = attrs.array(name, dtype)
                default = np.asarray(attrs.get(default_name, -1 if dtype is np.int64 else -0.0),
                                     dtype)
    if keys is None or values is None or len(keys) != len(values) or not len(keys):
        raise attrs.refuse("LabelEncoder needs numeric keys and values of one length")
    if default is None:
        default = np.zeros((), values.dtype) if values.dtype.kind != "i" else \
            np.asarray(-1, values.dtype)
    return keys.reshape(-1), values.reshape(-1), np.asarray(default, values.dtype).reshape(())


def label_encoder(b: Body, attrs: Attrs, dtypes) -> list[str]:
    """Each element looked up among the keys: the value of the first equal key, else the
    default. Compiled as a comparison against every key (the tables of converted models hold
    tens to hundreds of keys)."""
    keys, values, default = _label_table(attrs)
    x = b.inputs[0]
    hits = b.op("Equal", b.op("Unsqueeze", x, b.ints(-1)), b.const(keys.astype(
        ir.DataType(dtypes[0]).numpy())))
    as_int = b.op("Cast", hits, to=int(ir.DataType.INT32))
    axis = b.ints(-1)
    found = b.op("Cast", b.op("ReduceMax", as_int, axis, keepdims=0), to=int(ir.DataType.BOOL))
    first = b.op("ArgMax", as_int, axis=-1, keepdims=0)
    return [b.op("Where", found, b.op("Gather", b.const(values), first), b.const(default))]


def imputer(b: Body, attrs: Attrs, dtypes) -> list[str]:
    """Every element equal to the replaced value (NaN: every NaN) becomes its column's
    imputed value."""
    x = b.inputs[0]
    if dtypes[0] == ir.DataType.FLOAT:
        fill = attrs.array("imputed_value_floats", np.float32)
        missing = np.float32(attrs.get("replaced_value_float", 0.0))
    else:
        fill = attrs.array("imputed_value_int64s", np.int64)
        missing = np.int64(attrs.get("replaced_value_int64", 0))
    if not len(fill):
        raise attrs.refuse("Imputer has no imputed values")
    if isinstance(missing, np.floating) and np.isnan(missing):
        replace = b.op("IsNaN", x)
    else:
        replace = b.op("Equal", x, b.const(missing))
    return [b.op("Where", replace, b.const(fill), x)]


def one_hot_encoder(b: Body, attrs: Attrs, dtypes) -> list[str]:
    """x.shape + [categories], float: 1 where the element (as int64, truncated, as
    onnxruntime reads it) is the category. An unknown category gives zeros; with zeros=0
    onnxruntime fails the run instead, which a compiled model does not reproduce."""
    attrs.no_strings("cats_strings")
    cats = attrs.array("cats_int64s", np.int64)
    if not len(cats):
        raise attrs.refuse("OneHotEncoder needs cats_int64s")
    x = b.inputs[0]
    if dtypes[0] != ir.DataType.INT64:
        x = b.op("Cast", x, to=int(ir.DataType.INT64))
    hits = b.op("Cast", b.op("Equal", b.op("Unsqueeze", x, b.ints(-1)), b.const(cats)),
                to=int(ir.DataType.FLOAT))
    last = np.array([c not in cats[j + 1:] for j, c in enumerate(cats.tolist())])
    if not last.all():  # a repeated category counts at its last position only
        hits = b.op("Mul", hits, b.const(last.astype(np.float32)))
    return [hits]


def feature_vectorizer(b: Body, attrs: Attrs, dtypes) -> list[str]:
    """The inputs as float rows [N, sum of inputdimensions], each cut or zero-padded to its
    declared width."""
    widths = attrs.array("inputdimensions", np.int64)
    if len(widths) != len(b.inputs):
        raise attrs.refuse(f"{len(widths)} inputdimensions for {len(b.inputs)} inputs")
    parts = []
    for name, dtype, value, width in zip(b.inputs, dtypes, attrs.node.inputs, widths,
                                         strict=True):
        x = as_float(b, name, dtype)
        shape = value.shape
        if shape is None or shape.rank() not in (1, 2) or not isinstance(shape[-1], int):
            raise attrs.refuse("FeatureVectorizer takes [N, C] or [C] inputs of known width")
        if shape.rank() == 1:
            x = b.op("Unsqueeze", x, b.ints(0))
        have = int(shape[-1])
        if have > width:
            x = b.op("Slice", x, b.ints(0), b.ints(int(width)), b.ints(1))
        elif have < width:
            x = b.op("Pad", x, b.ints(0, 0, 0, int(width) - have))
        parts.append(x)
    return [parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=1)]
