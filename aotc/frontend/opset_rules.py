"""Per-operator rewrites from older opsets to the canonical one (see `opset`).

A rule gets the node and the `since_version` of the schema the node was written against. It
edits the node in place (inserting the Constant/helper nodes it needs before it) and returns
True when the node is now in canonical form, False to let the generic compatibility check
decide (the rule had nothing to do for that version).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend.irutil import get_attr, insert_constant, insert_node, pop_attr, set_input

Rule = Callable[[ir.Node, int], bool]
RULES: dict[str, Rule] = {}


def _rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn
    return register


def _unsupported(node: ir.Node, what: str) -> AotcError:
    return AotcError(f"{what} is not supported", node=node.name, op=node.op_type,
                     hint="re-export the model at a newer opset")


def _float_dtype(value: ir.Value | None) -> np.dtype:
    if value is not None and value.dtype is not None and value.dtype.is_floating_point():
        return value.dtype.numpy()
    return np.dtype(np.float32)


def _attr_to_input(node: ir.Node, attr: str, index: int, dtype: type | np.dtype) -> bool:
    """Move attribute `attr` to input `index` as a constant; True when it was present."""
    value = pop_attr(node, attr)
    if value is None:
        return False
    set_input(node, index, insert_constant(node, np.asarray(value, dtype=dtype)))
    return True


_AXES_INPUT_SINCE = {"Squeeze": 13, "Unsqueeze": 13, "ReduceSum": 13}
_REDUCE_OPS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
               "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")


@_rule("Squeeze", "Unsqueeze", *_REDUCE_OPS)
def _axes(node: ir.Node, since: int) -> bool:
    if since < _AXES_INPUT_SINCE.get(node.op_type, 18):
        _attr_to_input(node, "axes", 1, np.int64)
    return False


@_rule("Split")
def _split(node: ir.Node, since: int) -> bool:
    if since < 13:
        _attr_to_input(node, "split", 1, np.int64)
    if since < 18 and (len(node.inputs) < 2 or node.inputs[1] is None):
        # Equal split into as many parts as there are outputs (num_outputs is required at 18).
        node.attributes["num_outputs"] = ir.AttrInt64("num_outputs", len(node.outputs))
    return False


@_rule("SplitToSequence")
def _split_to_sequence(node: ir.Node, since: int) -> bool:
    # keepdims applies only without a split input; onnxscript's folding of SplitToSequence
    # applies it either way (squeezing parts of size 2), so a present split drops it.
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        pop_attr(node, "keepdims")
    return False


@_rule("Clip")
def _clip(node: ir.Node, since: int) -> bool:
    if since < 11:
        dtype = _float_dtype(node.inputs[0])
        lo, hi = pop_attr(node, "min"), pop_attr(node, "max")
        if lo is not None:
            set_input(node, 1, insert_constant(node, np.asarray(lo, dtype=dtype)))
        if hi is not None:
            set_input(node, 2, insert_constant(node, np.asarray(hi, dtype=dtype)))
    return False


@_rule("Pad")
def _pad(node: ir.Node, since: int) -> bool:
    if since < 11:
        pads = pop_attr(node, "pads", None)
        if pads is None:
            pads = pop_attr(node, "paddings")
        value = pop_attr(node, "value", 0.0)
        set_input(node, 1, insert_constant(node, np.asarray(pads, dtype=np.int64)))
        if value != 0.0:
            dtype = _float_dtype(node.inputs[0])
            set_input(node, 2, insert_constant(node, np.asarray(value, dtype=dtype)))
    return False


@_rule("Slice")
def _slice(node: ir.Node, since: int) -> bool:
    if since < 10:
        starts, ends = pop_attr(node, "starts"), pop_attr(node, "ends")
        axes = pop_attr(node, "axes")
        set_input(node, 1, insert_constant(node, np.asarray(starts, dtype=np.int64)))
        set_input(node, 2, insert_constant(node, np.asarray(ends, dtype=np.int64)))
        if axes is not None:
            set_input(node, 3, insert_constant(node, np.asarray(axes, dtype=np.int64)))
    return False


@_rule("TopK")
def _topk(node: ir.Node, since: int) -> bool:
    if since < 10:
        set_input(node, 1, insert_constant(node, np.asarray([pop_attr(node, "k")], np.int64)))
    return False


@_rule("Reshape")
def _reshape(node: ir.Node, since: int) -> bool:
    if since < 5:
        _attr_to_input(node, "shape", 1, np.int64)
    return False


@_rule("Concat")
def _concat(node: ir.Node, since: int) -> bool:
    if since < 4 and "axis" not in node.attributes:
        node.attributes["axis"] = ir.AttrInt64("axis", 1)
    return False


@_rule("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less")
def _legacy_broadcast(node: ir.Node, since: int) -> bool:
    if since < 7:
        broadcast = pop_attr(node, "broadcast", 0)
        if "axis" in node.attributes:
            if broadcast:
                raise _unsupported(node, "legacy broadcasting with an 'axis' (opset < 7)")
            node.attributes.pop("axis")
    return False


@_rule("BatchNormalization")
def _batchnorm(node: ir.Node, since: int) -> bool:
    if since < 9 and pop_attr(node, "spatial", 1) != 1:
        raise _unsupported(node, "BatchNormalization with spatial=0")
    if since < 14 and len(node.outputs) > 1:
        if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
            raise _unsupported(node, "BatchNormalization in training mode (extra outputs used)")
        node.resize_outputs(1)
    return False


@_rule("Dropout")
def _dropout(node: ir.Node, since: int) -> bool:
    if since < 12:
        ratio = pop_attr(node, "ratio")
        if ratio is not None:
            set_input(node, 1, insert_constant(node, np.asarray(ratio, dtype=np.float32)))
    if since < 10 and len(node.outputs) > 1:
        mask = node.outputs[1]
        if mask.uses() or mask.is_graph_output():
            raise _unsupported(node, "the mask output of Dropout before opset 10")
        node.resize_outputs(1)
    return False


@_rule("Softmax", "LogSoftmax", "Hardmax")
def _softmax(node: ir.Node, since: int) -> bool:
    """Before opset 13 these coerce the input to 2-D at `axis` and work on the flattened rows."""
    if since >= 13:
        return False
    axis = pop_attr(node, "axis", 1)
    x = node.inputs[0]
    rank = len(x.shape) if x is not None and x.shape is not None else None
    if rank is not None and axis % rank == rank - 1:
        node.attributes["axis"] = ir.AttrInt64("axis", -1)
        return False
    if rank is not None:
        axis %= rank
    # y = Reshape(Softmax(Flatten(x, axis), axis=1), Shape(x)); this node becomes the Reshape.
    flat = insert_node(node, "Flatten", [x], {"axis": axis}).outputs[0]
    soft = insert_node(node, node.op_type, [flat], {"axis": 1}).outputs[0]
    shape = insert_node(node, "Shape", [x]).outputs[0]
    node.op_type = "Reshape"
    node.replace_input_with(0, soft)
    set_input(node, 1, shape)
    return True


def _nearest_floor_asymmetric(node: ir.Node, mode: str) -> None:
    node.attributes["mode"] = ir.AttrString("mode", mode)
    node.attributes["coordinate_transformation_mode"] = ir.AttrString(
        "coordinate_transformation_mode", "asymmetric")
    if mode == "nearest":
        node.attributes["nearest_mode"] = ir.AttrString("nearest_mode", "floor")


@_rule("Upsample")
def _upsample(node: ir.Node, since: int) -> bool:
    """Upsample (deprecated) → Resize with the same (asymmetric, floor) semantics."""
    if since < 7:
        raise _unsupported(node, "Upsample-1 (experimental)")
    mode = pop_attr(node, "mode", "nearest")
    if since < 9:
        scales = np.asarray(pop_attr(node, "scales"), dtype=np.float32)
        node.resize_inputs(1)
        set_input(node, 2, insert_constant(node, scales))
    else:
        scales_value = node.inputs[1]
        node.replace_input_with(1, None)
        set_input(node, 2, scales_value)
    node.op_type = "Resize"
    _nearest_floor_asymmetric(node, "linear" if mode in ("linear", "bilinear") else mode)
    return True


@_rule("Resize")
def _resize(node: ir.Node, since: int) -> bool:
    if since == 10:
        scales_value = node.inputs[1]
        node.replace_input_with(1, None)
        set_input(node, 2, scales_value)
        _nearest_floor_asymmetric(node, get_attr(node, "mode", "nearest"))
        return False
    if since == 11:
        if get_attr(node, "coordinate_transformation_mode") == "tf_half_pixel_for_nn":
            raise _unsupported(node, "coordinate_transformation_mode 'tf_half_pixel_for_nn'")
        # Opset 11 wants empty tensors for unused roi/scales; later opsets leave them out.
        for i in (1, 2):
            v = node.inputs[i] if len(node.inputs) > i else None
            if v is not None and v.const_value is not None and v.const_value.size == 0:
                node.replace_input_with(i, None)
    return False


@_rule("Scatter")
def _scatter(node: ir.Node, since: int) -> bool:
    node.op_type = "ScatterElements"  # Scatter-9/11 are ScatterElements-11 under another name
    return True


@_rule("GridSample")
def _grid_sample(node: ir.Node, since: int) -> bool:
    if since < 20:
        mode = get_attr(node, "mode", "bilinear")
        new = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
        node.attributes["mode"] = ir.AttrString("mode", new)
    return False


@_rule("RoiAlign")
def _roi_align(node: ir.Node, since: int) -> bool:
    if since < 16 and "coordinate_transformation_mode" not in node.attributes:
        node.attributes["coordinate_transformation_mode"] = ir.AttrString(
            "coordinate_transformation_mode", "output_half_pixel")
    return False


@_rule("DFT")
def _dft(node: ir.Node, since: int) -> bool:
    if since < 20:
        axis = pop_attr(node, "axis", 1)
        set_input(node, 2, insert_constant(node, np.asarray(axis, dtype=np.int64)))
    return False


@_rule("STFT")
def _stft(node: ir.Node, since: int) -> bool:
    """onnx's shape inference takes an absent onesided as 0 (all frame_length bins); the spec's
    default, which onnxruntime follows, is 1: write it, and correct the bins an earlier
    inference gave the output when the frame length is known."""
    if "onesided" in node.attributes:
        return False
    node.attributes["onesided"] = ir.AttrInt64("onesided", 1)
    ins = list(node.inputs) + [None] * 4
    frame = None
    if ins[3] is not None and ins[3].const_value is not None:
        frame = int(ins[3].const_value.numpy().reshape(-1)[0])
    elif ins[2] is not None and ins[2].shape is not None and ins[2].shape.is_static():
        frame = int(ins[2].shape[0])
    out = node.outputs[0]
    if frame is not None and out.shape is not None and len(out.shape) == 4:
        out.shape = ir.Shape([out.shape[0], out.shape[1], frame // 2 + 1, out.shape[3]])
    return False


@_rule("GroupNormalization")
def _group_norm(node: ir.Node, since: int) -> bool:
    """Opset 18 has one scale/bias per group; 21 has one per channel: repeat each C/G times."""
    if since >= 21:
        return False
    groups = get_attr(node, "num_groups")
    x = node.inputs[0]
    channels = insert_node(node, "Shape", [x], {"start": 1, "end": 2}).outputs[0]
    g = insert_constant(node, np.asarray([groups], dtype=np.int64))
    per_group = insert_node(node, "Div", [channels, g]).outputs[0]
    grid = insert_node(node, "Concat", [g, per_group], {"axis": 0}).outputs[0]
    col = insert_constant(node, np.asarray([1], dtype=np.int64))
    flat = insert_constant(node, np.asarray([-1], dtype=np.int64))
    for i in (1, 2):
        column = insert_node(node, "Unsqueeze", [node.inputs[i], col]).outputs[0]
        tiled = insert_node(node, "Expand", [column, grid]).outputs[0]
        node.replace_input_with(i, insert_node(node, "Reshape", [tiled, flat]).outputs[0])
    return False
