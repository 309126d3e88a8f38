"""Builds aotc's sample ONNX models (onnx.helper, fixed seeds) and, with torch, exported ones.

    python models/make_models.py [--out models/]     # the committed sample models
    python models/make_models.py --torch OUT_DIR     # torch.onnx exports (not committed)

Every sample model is fp32, batch 1, fully static, opset 17 (IR 8); rebuilding is byte-identical.
Weights are scaled (He / 1/sqrt(fan_in)) so activations stay O(1) on N(0,1) inputs.
"""

from __future__ import annotations

import argparse
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "aotc-make_models"


class GraphBuilder:
    """Accumulates nodes and initializers with exporter-style names (``/scope/Op_output_0``)."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._used: set[str] = set()

    def _unique(self, base: str) -> str:
        name, i = base, 1
        while name in self._used:
            name = f"{base}_{i}"
            i += 1
        self._used.add(name)
        return name

    def init(self, name: str, array: np.ndarray) -> str:
        name = self._unique(name)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const_node(self, scope: str, array: np.ndarray) -> str:
        """A ``Constant`` node, as exporters write small constants."""
        return self.op("Constant", [], scope=scope, value=numpy_helper.from_array(array))

    def op(self, op_type: str, inputs: Sequence[str], *, scope: str, n_out: int = 1,
           **attrs: Any) -> str:
        node_name = self._unique(f"{scope}/{op_type}")
        outs = [f"{node_name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=node_name, **attrs))
        return outs[0]

    # ---- weights -------------------------------------------------------------------------
    def normal(self, shape: Sequence[int], std: float) -> np.ndarray:
        return (self.rng.standard_normal(tuple(shape)) * std).astype(np.float32)

    def uniform(self, shape: Sequence[int], lo: float, hi: float) -> np.ndarray:
        return self.rng.uniform(lo, hi, tuple(shape)).astype(np.float32)

    # ---- layers --------------------------------------------------------------------------
    def conv(self, x: str, scope: str, cin: int, cout: int, k: int, *, stride: int = 1,
             group: int = 1, bias: bool = True, gain: float = 2.0) -> str:
        fan_in = cin // group * k * k
        w = self.init(f"{scope}.weight", self.normal((cout, cin // group, k, k),
                                                     math.sqrt(gain / fan_in)))
        inputs = [x, w]
        if bias:
            inputs.append(self.init(f"{scope}.bias", self.normal((cout,), 0.05)))
        p = k // 2
        return self.op("Conv", inputs, scope=scope, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[p, p, p, p], dilations=[1, 1], group=group)

    def bn(self, x: str, scope: str, c: int) -> str:
        scale = self.init(f"{scope}.weight", self.uniform((c,), 0.8, 1.2))
        bias = self.init(f"{scope}.bias", self.normal((c,), 0.1))
        mean = self.init(f"{scope}.running_mean", self.normal((c,), 0.1))
        var = self.init(f"{scope}.running_var", self.uniform((c,), 0.8, 1.2))
        return self.op("BatchNormalization", [x, scale, bias, mean, var], scope=scope,
                       epsilon=1e-5, momentum=0.9)

    def gemm(self, x: str, scope: str, cin: int, cout: int, gain: float = 1.0) -> str:
        """``Gemm(x, W^T, b)`` with transB=1, as torch exports ``nn.Linear`` on 2-D inputs."""
        w = self.init(f"{scope}.weight", self.normal((cout, cin), math.sqrt(gain / cin)))
        b = self.init(f"{scope}.bias", self.normal((cout,), 0.05))
        return self.op("Gemm", [x, w, b], scope=scope, alpha=1.0, beta=1.0, transB=1)

    def linear(self, x: str, scope: str, cin: int, cout: int, gain: float = 1.0) -> str:
        """``MatMul(x, W) + b``, as exporters write ``nn.Linear`` on 3-D inputs."""
        w = self.init(f"{scope}.weight", self.normal((cin, cout), math.sqrt(gain / cin)))
        b = self.init(f"{scope}.bias", self.normal((cout,), 0.05))
        return self.op("Add", [self.op("MatMul", [x, w], scope=scope), b], scope=scope)

    def layer_norm(self, x: str, scope: str, c: int) -> str:
        g = self.init(f"{scope}.weight", self.uniform((c,), 0.9, 1.1))
        b = self.init(f"{scope}.bias", self.normal((c,), 0.05))
        return self.op("LayerNormalization", [x, g, b], scope=scope, axis=-1, epsilon=1e-5)

    def relu(self, x: str, scope: str) -> str:
        return self.op("Relu", [x], scope=scope)

    def model(self, inputs: Sequence[onnx.ValueInfoProto],
              outputs: Sequence[onnx.ValueInfoProto], doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, list(inputs), list(outputs),
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=IR_VERSION, producer_name=PRODUCER,
                                  producer_version="1", doc_string=doc)
        return model


def _f32(name: str, shape: Sequence[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


# ---- the sample models ---------------------------------------------------------------------
def make_mlp() -> onnx.ModelProto:
    b = GraphBuilder("mlp", seed=1)
    x = b.gemm("input", "/fc1", 64, 128, gain=2.0)  # Gemm (transB=1)
    x = b.relu(x, "/act1")
    x = b.linear(x, "/fc2", 128, 64)  # MatMul + Add
    x = b.op("Tanh", [x], scope="/act2")
    x = b.linear(x, "/fc3", 64, 32)
    x = b.op("Sigmoid", [x], scope="/act3")
    x = b.gemm(x, "/head", 32, 10, gain=16.0)  # Sigmoid outputs spread little: widen logits
    b.nodes.append(helper.make_node("Softmax", [x], ["probs"], name="/softmax/Softmax", axis=-1))
    return b.model([_f32("input", [1, 64])], [_f32("probs", [1, 10])],
                   "MLP 64-128-64-32-10: Gemm/MatMul+Add, Relu, Tanh, Sigmoid, Softmax.")


def _conv_bn(b: GraphBuilder, x: str, scope: str, cin: int, cout: int, k: int,
             stride: int = 1, group: int = 1, gain: float = 1.0) -> str:
    x = b.conv(x, f"{scope}/conv", cin, cout, k, stride=stride, group=group, bias=False,
               gain=gain)
    return b.bn(x, f"{scope}/bn", cout)


def make_resnet_tiny() -> onnx.ModelProto:
    b = GraphBuilder("resnet_tiny", seed=2)
    x = b.relu(_conv_bn(b, "input", "/stem", 3, 16, 3), "/stem/relu")  # 16x32x32
    x = b.op("MaxPool", [x], scope="/stem/pool", kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1])  # 16x16x16
    # block 1: identity shortcut
    y = b.relu(_conv_bn(b, x, "/layer1/0/a", 16, 16, 3), "/layer1/0/relu_a")
    y = _conv_bn(b, y, "/layer1/0/b", 16, 16, 3)
    x = b.relu(b.op("Add", [y, x], scope="/layer1/0"), "/layer1/0/relu")
    # block 2: stride-2, 1x1 projection shortcut
    y = b.relu(_conv_bn(b, x, "/layer2/0/a", 16, 32, 3, stride=2), "/layer2/0/relu_a")
    y = _conv_bn(b, y, "/layer2/0/b", 32, 32, 3)
    s = _conv_bn(b, x, "/layer2/0/downsample", 16, 32, 1, stride=2)
    x = b.relu(b.op("Add", [y, s], scope="/layer2/0"), "/layer2/0/relu")  # 32x8x8
    x = b.op("GlobalAveragePool", [x], scope="/pool")
    x = b.op("Flatten", [x], scope="/flatten", axis=1)
    w = b.init("fc.weight", b.normal((10, 32), math.sqrt(1.0 / 32)))
    bias = b.init("fc.bias", b.normal((10,), 0.05))
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["logits"], name="/fc/Gemm",
                                    transB=1))
    return b.model([_f32("input", [1, 3, 32, 32])], [_f32("logits", [1, 10])],
                   "ResNet-style CNN: Conv+BN+Relu, MaxPool, 2 residual blocks "
                   "(identity, stride-2 with 1x1 projection), GlobalAveragePool, Gemm.")


def make_mobilenet_tiny() -> onnx.ModelProto:
    b = GraphBuilder("mobilenet_tiny", seed=3)
    zero = b.init("clip.min", np.array(0.0, np.float32))
    six = b.init("clip.max", np.array(6.0, np.float32))

    def relu6(x: str, scope: str) -> str:
        return b.op("Clip", [x, zero, six], scope=scope)

    def inverted_residual(x: str, scope: str, cin: int, cout: int, expand: int, stride: int,
                          act: Callable[[str, str], str]) -> str:
        hidden = cin * expand
        y = act(_conv_bn(b, x, f"{scope}/expand", cin, hidden, 1, gain=2.0),
                f"{scope}/expand/act")
        y = act(_conv_bn(b, y, f"{scope}/dw", hidden, hidden, 3, stride=stride, group=hidden,
                         gain=2.0), f"{scope}/dw/act")
        y = _conv_bn(b, y, f"{scope}/project", hidden, cout, 1)
        if stride == 1 and cin == cout:
            y = b.op("Add", [x, y], scope=scope)
        return y

    def hswish(x: str, scope: str) -> str:
        return b.op("HardSwish", [x], scope=scope)

    x = hswish(_conv_bn(b, "input", "/stem", 3, 16, 3, stride=2), "/stem/act")  # 16x16x16
    x = inverted_residual(x, "/blocks/0", 16, 16, 3, 1, relu6)
    x = inverted_residual(x, "/blocks/1", 16, 24, 4, 2, hswish)  # 24x8x8
    x = inverted_residual(x, "/blocks/2", 24, 24, 3, 1, relu6)
    x = hswish(_conv_bn(b, x, "/head", 24, 64, 1, gain=2.0), "/head/act")
    x = b.op("GlobalAveragePool", [x], scope="/pool")
    x = b.op("Flatten", [x], scope="/flatten", axis=1)
    w = b.init("classifier.weight", b.normal((10, 64), math.sqrt(2.0 / 64)))
    bias = b.init("classifier.bias", b.normal((10,), 0.05))
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["logits"],
                                    name="/classifier/Gemm", transB=1))
    return b.model([_f32("input", [1, 3, 32, 32])], [_f32("logits", [1, 10])],
                   "MobileNetV2-style CNN: 1x1 expand, depthwise 3x3 (stride 1 and 2), "
                   "Clip(0,6), HardSwish, BN, inverted residual Add, GlobalAveragePool, Gemm.")


VOCAB, SEQ, D_MODEL, HEADS, D_FF, LAYERS = 100, 16, 32, 2, 64, 2
HEAD_DIM = D_MODEL // HEADS


def _i64(values: Sequence[int] | int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _attention(b: GraphBuilder, x: str, scope: str, layer: int) -> str:
    q = b.linear(x, f"{scope}/query", D_MODEL, D_MODEL)
    k = b.linear(x, f"{scope}/key", D_MODEL, D_MODEL)
    v = b.linear(x, f"{scope}/value", D_MODEL, D_MODEL)
    if layer == 0:
        # Exporter-style shape arithmetic: [B, S] from Shape(x), then Concat with [H, Dh].
        shape = b.op("Shape", [x], scope=scope)
        dims = []
        for i in (0, 1):
            d = b.op("Gather", [shape, b.const_node(scope, _i64(i))], scope=scope, axis=0)
            dims.append(b.op("Unsqueeze", [d, b.const_node(scope, _i64([0]))], scope=scope))
        heads = b.const_node(scope, _i64([HEADS]))
        hdim = b.const_node(scope, _i64([HEAD_DIM]))
        split_shape = b.op("Concat", [*dims, heads, hdim], scope=scope, axis=0)
    else:
        split_shape = b.const_node(scope, _i64([1, SEQ, HEADS, HEAD_DIM]))
    q = b.op("Transpose", [b.op("Reshape", [q, split_shape], scope=scope)], scope=scope,
             perm=[0, 2, 1, 3])  # [B, H, S, Dh]
    k = b.op("Transpose", [b.op("Reshape", [k, split_shape], scope=scope)], scope=scope,
             perm=[0, 2, 3, 1])  # [B, H, Dh, S]
    v = b.op("Transpose", [b.op("Reshape", [v, split_shape], scope=scope)], scope=scope,
             perm=[0, 2, 1, 3])
    scores = b.op("MatMul", [q, k], scope=scope)
    if layer == 0:
        scores = b.op("Div", [scores, b.const_node(scope, np.array(math.sqrt(HEAD_DIM),
                                                                   np.float32))], scope=scope)
    else:
        scale = b.init(f"{scope}.scale", np.array(1.0 / math.sqrt(HEAD_DIM), np.float32))
        scores = b.op("Mul", [scores, scale], scope=scope)
    probs = b.op("Softmax", [scores], scope=scope, axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v], scope=scope)], scope=scope,
               perm=[0, 2, 1, 3])  # [B, S, H, Dh]
    merge_shape = b.init(f"{scope}.merge_shape", _i64([1, SEQ, D_MODEL]))
    ctx = b.op("Reshape", [ctx, merge_shape], scope=scope)
    return b.linear(ctx, f"{scope}/output", D_MODEL, D_MODEL)


def _gelu_erf(b: GraphBuilder, x: str, scope: str) -> str:
    """``x * 0.5 * (1 + Erf(x / sqrt(2)))``, the node sequence torch's exporter writes."""
    sqrt2 = b.init(f"{scope}.sqrt2", np.array(math.sqrt(2.0), np.float32))
    one = b.init(f"{scope}.one", np.array(1.0, np.float32))
    half = b.init(f"{scope}.half", np.array(0.5, np.float32))
    e = b.op("Erf", [b.op("Div", [x, sqrt2], scope=scope)], scope=scope)
    y = b.op("Mul", [x, b.op("Add", [e, one], scope=scope)], scope=scope)
    return b.op("Mul", [y, half], scope=scope)


def make_transformer_tiny() -> onnx.ModelProto:
    b = GraphBuilder("transformer_tiny", seed=4)
    tok = b.init("embeddings.word_embeddings.weight", b.normal((VOCAB, D_MODEL), 1.0))
    pos = b.init("embeddings.position_embeddings", b.normal((1, SEQ, D_MODEL), 0.5))
    x = b.op("Gather", [tok, "input_ids"], scope="/embeddings", axis=0)
    x = b.op("Add", [x, pos], scope="/embeddings")
    x = b.layer_norm(x, "/embeddings/LayerNorm", D_MODEL)
    for i in range(LAYERS):
        scope = f"/encoder/layer.{i}"
        a = _attention(b, x, f"{scope}/attention", i)
        x = b.layer_norm(b.op("Add", [a, x], scope=f"{scope}/attention"),
                         f"{scope}/attention/LayerNorm", D_MODEL)
        h = _gelu_erf(b, b.linear(x, f"{scope}/intermediate", D_MODEL, D_FF, gain=2.0),
                      f"{scope}/intermediate/gelu")
        h = b.linear(h, f"{scope}/output", D_FF, D_MODEL)
        x = b.layer_norm(b.op("Add", [h, x], scope=f"{scope}/output"),
                         f"{scope}/output/LayerNorm", D_MODEL)
    g = b.init("final_norm.weight", b.uniform((D_MODEL,), 0.9, 1.1))
    beta = b.init("final_norm.bias", b.normal((D_MODEL,), 0.05))
    b.nodes.append(helper.make_node("LayerNormalization", [x, g, beta], ["last_hidden_state"],
                                    name="/final_norm/LayerNormalization", axis=-1,
                                    epsilon=1e-5))
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, SEQ])
    return b.model([ids], [_f32("last_hidden_state", [1, SEQ, D_MODEL])],
                   f"BERT-style encoder: vocab {VOCAB}, seq {SEQ}, d_model {D_MODEL}, "
                   f"{HEADS} heads, {LAYERS} layers, Erf-form GELU FFN, post-LayerNorm.")


def make_unet_tiny() -> onnx.ModelProto:
    b = GraphBuilder("unet_tiny", seed=5)

    def double_conv(x: str, scope: str, cin: int, cout: int) -> str:
        x = b.relu(b.conv(x, f"{scope}/conv1", cin, cout, 3, gain=1.6), f"{scope}/relu1")
        return b.relu(b.conv(x, f"{scope}/conv2", cout, cout, 3, gain=1.6), f"{scope}/relu2")

    def pool(x: str, scope: str) -> str:
        return b.op("MaxPool", [x], scope=scope, kernel_shape=[2, 2], strides=[2, 2])

    e1 = double_conv("input", "/enc1", 3, 8)  # 8x32x32
    e2 = double_conv(pool(e1, "/pool1"), "/enc2", 8, 16)  # 16x16x16
    m = double_conv(pool(e2, "/pool2"), "/bottleneck", 16, 32)  # 32x8x8
    # up 2: ConvTranspose 2x2 stride 2, skip from enc2
    w = b.init("/up2/convt.weight", b.normal((32, 16, 2, 2), math.sqrt(1.0 / 32)))
    bias = b.init("/up2/convt.bias", b.normal((16,), 0.05))
    u = b.op("ConvTranspose", [m, w, bias], scope="/up2/convt", kernel_shape=[2, 2],
             strides=[2, 2])  # 16x16x16
    u = b.op("Concat", [u, e2], scope="/up2", axis=1)  # 32x16x16
    u = double_conv(u, "/dec2", 32, 16)
    # up 1: nearest Resize x2, skip from enc1
    scales = b.init("/up1/scales", np.array([1.0, 1.0, 2.0, 2.0], np.float32))
    u = b.op("Resize", [u, "", scales], scope="/up1", mode="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # 16x32x32
    u = b.op("Concat", [u, e1], scope="/up1", axis=1)  # 24x32x32
    u = double_conv(u, "/dec1", 24, 8)
    u = b.conv(u, "/out/conv", 8, 1, 1, gain=1.0)
    b.nodes.append(helper.make_node("Sigmoid", [u], ["mask"], name="/out/Sigmoid"))
    return b.model([_f32("input", [1, 3, 32, 32])], [_f32("mask", [1, 1, 32, 32])],
                   "U-Net: 2 encoder levels (Conv+Relu, MaxPool), bottleneck, ConvTranspose "
                   "and nearest-Resize upsampling, skip Concat, 1x1 Conv, Sigmoid.")


SAMPLE_BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": make_mlp,
    "resnet_tiny": make_resnet_tiny,
    "mobilenet_tiny": make_mobilenet_tiny,
    "transformer_tiny": make_transformer_tiny,
    "unet_tiny": make_unet_tiny,
}


def build_sample_models() -> dict[str, bytes]:
    """Serialized sample models by name; checked with ``full_check=True``."""
    out: dict[str, bytes] = {}
    for name, build in SAMPLE_BUILDERS.items():
        model = build()
        onnx.checker.check_model(model, full_check=True)
        out[name] = model.SerializeToString(deterministic=True)
    return out


def write_sample_models(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in build_sample_models().items():
        path = out_dir / f"{name}.onnx"
        path.write_bytes(data)
        paths.append(path)
    return paths


# ---- torch exports (test-time only; need torch) ----------------------------------------------
TORCH_EXPORT_BATCH = 2


def torch_modules() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """Tiny torch modules (seeded, eval mode) and example inputs at ``TORCH_EXPORT_BATCH``."""
    import torch
    from torch import nn

    class TinyCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(8), nn.ReLU())
            self.conv_a = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
            self.bn_a = nn.BatchNorm2d(16)
            self.conv_b = nn.Conv2d(16, 16, 3, padding=1, bias=False)
            self.bn_b = nn.BatchNorm2d(16)
            self.short = nn.Conv2d(8, 16, 1, stride=2, bias=False)
            self.fc = nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            y = self.bn_b(self.conv_b(torch.relu(self.bn_a(self.conv_a(x)))))
            y = torch.relu(y + self.short(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    class TinyAttention(nn.Module):
        def __init__(self, d: int = 32, heads: int = 2, ff: int = 64) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln1 = nn.LayerNorm(d)
            self.ln2 = nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            h = self.ln1(x)
            qkv = self.qkv(h).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.ff(self.ln2(x))

    torch.manual_seed(0)
    cnn = TinyCNN()
    for m in cnn.modules():  # non-trivial BN statistics, so BN folding is really tested
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0.0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.8, 1.2)
            m.bias.data.normal_(0.0, 0.1)
    attn = TinyAttention()
    n = TORCH_EXPORT_BATCH
    return {
        "cnn": (cnn.eval(), (torch.randn(n, 3, 16, 16),)),
        "attention": (attn.eval(), (torch.randn(n, 8, 32),)),
    }


def export_torch_models(out_dir: Path | str) -> dict[str, Path]:
    """Exports each module twice (TorchScript and dynamo exporter), batch dimension dynamic.

    Returns ``{"<module>_ts": path, "<module>_dynamo": path}``. Needs torch (and onnxscript).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)  # "torchvision is not installed" notices
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # legacy-exporter deprecation, tracer warnings
            for name, (module, args) in torch_modules().items():
                paths.update(_export_both(module, args, out_dir / name))
    finally:
        onnx_logger.setLevel(level)
    return paths


def _export_both(module: Any, args: tuple[Any, ...], stem: Path) -> dict[str, Path]:
    import torch

    ts_path = stem.with_name(f"{stem.name}_ts.onnx")
    torch.onnx.export(module, args, str(ts_path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    dy_path = stem.with_name(f"{stem.name}_dynamo.onnx")
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.onnx.export(module, args, dynamo=True, optimize=True,
                                input_names=["input"], output_names=["output"],
                                dynamic_shapes=({0: batch},), verbose=False)
    program.save(str(dy_path))
    return {f"{stem.name}_ts": ts_path, f"{stem.name}_dynamo": dy_path}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder for the sample models (default: models/)")
    parser.add_argument("--torch", type=Path, metavar="OUT_DIR",
                        help="export the torch models into OUT_DIR instead")
    args = parser.parse_args(argv)
    if args.torch is not None:
        for name, path in export_torch_models(args.torch).items():
            print(f"{name}: {path}")
        return
    for path in write_sample_models(args.out):
        print(f"{path}  {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
