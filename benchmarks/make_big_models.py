"""Full-size benchmark models, random weights, exported from torch (TorchScript exporter, opset 17):

- `resnet50.onnx`: ResNet-50 v1.5 (stride in the 3x3 conv), input [1, 3, 224, 224] (~100 MB).
- `mobilenetv2.onnx`: MobileNetV2 width 1.0, input [1, 3, 224, 224] (~14 MB).
- `bert_encoder.onnx`: a BERT-base-sized encoder: 12 post-LN layers, hidden 768, 12 heads,
  FFN 3072 with erf GELU, input embeddings [1, 128, 768] (~340 MB).
- `efficientnet_b0.onnx`: EfficientNet-B0's layout: MBConv blocks with swish (SiLU),
  squeeze-excite and 3x3/5x5 depthwise convolutions, input [1, 3, 224, 224] (~21 MB).
- `regnety_400mf.onnx`: RegNetY-400MF's layout: grouped 3x3 convolutions (8 channels per
  group) with squeeze-excite, widths 48/104/208/440, input [1, 3, 224, 224] (~17 MB).
- `vit_b16.onnx`: a ViT-B/16-sized encoder: 16x16 patches of a 224x224 image (197 tokens with
  the class token), 12 pre-LN layers, hidden 768, 12 heads, MLP 3072 (~330 MB).

And their int8 forms by onnxruntime.quantization (`quantize_static`, QDQ, per-tensor, MinMax
calibration on 4 seeded random inputs): `resnet50_int8.onnx`, `mobilenetv2_int8.onnx` and
`bert_encoder_int8.onnx`.

And `bert_encoder_seq.onnx`: the BERT encoder exported with its sequence length left symbolic
(`seq`), for bundles compiled with a length range (`--input-shape input=1,1..512,768`;
`benchmarks/bench_lengths.py`).

They are written into `benchmarks/models/` (git-ignored; too large to commit).

    python benchmarks/make_big_models.py [--out benchmarks/models] [--only resnet50 ...]
"""

from __future__ import annotations

import argparse
import logging
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

OUT_DIR = Path(__file__).resolve().parent / "models"
OPSET = 17


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class PooledClassifier(nn.Module):
    """A convolutional network's head: `features`, global average pooling, then `fc`."""

    features: nn.Sequential
    fc: nn.Linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---- ResNet-50 --------------------------------------------------------------------------------
class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, stride),
                                  conv_bn(width, cout, 1, act=None))
        self.short = (conv_bn(cin, cout, 1, stride, act=None)
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride)


class ResNet50(PooledClassifier):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for width, blocks, stride in RESNET50_STAGES:
            for b in range(blocks):
                layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
                cin = 4 * width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)


# ---- MobileNetV2 ------------------------------------------------------------------------------
class ExpandedBlock(nn.Module):
    """`body` (set by the subclass), plus the input where the block keeps its shape."""

    body: nn.Sequential

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class InvertedResidual(ExpandedBlock):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__(cin, cout, stride)
        hidden = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=nn.ReLU6)]
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)


# (expansion, channels, blocks, stride of the first block)
MOBILENETV2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                      (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(PooledClassifier):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)]
        cin = 32
        for t, c, n, s in MOBILENETV2_BLOCKS:
            for b in range(n):
                layers.append(InvertedResidual(cin, c, s if b == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)


# ---- BERT-base-sized encoder ------------------------------------------------------------------
class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(b, s, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), dim=-1)
        x = self.ln1(x + self.o((att @ v).transpose(1, 2).reshape(b, s, d)))
        return self.ln2(x + self.ff(x))


class BertEncoder(nn.Module):
    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12, ff: int = 3072) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(EncoderLayer(d, heads, ff) for _ in range(layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


# ---- EfficientNet-B0 -------------------------------------------------------------------------
class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int, act: type[nn.Module]) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.act = act()
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(self.act(self.reduce(s))))


class MBConv(ExpandedBlock):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int) -> None:
        super().__init__(cin, cout, stride)
        hidden = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=nn.SiLU)]
        layers += [conv_bn(hidden, hidden, k, stride, groups=hidden, act=nn.SiLU),
                   SqueezeExcite(hidden, max(1, cin // 4), nn.SiLU),
                   conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)


# (expansion, kernel, stride of the first block, channels, blocks)
EFFICIENTNET_B0_STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2),
                          (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4),
                          (6, 3, 1, 320, 1))


class EfficientNetB0(PooledClassifier):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 32, 3, 2, act=nn.SiLU)]
        cin = 32
        for t, k, s, c, n in EFFICIENTNET_B0_STAGES:
            for b in range(n):
                layers.append(MBConv(cin, c, k, s if b == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)


# ---- RegNetY-400MF ----------------------------------------------------------------------------
class RegNetYBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, group_width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(cin, cout, 1),
            conv_bn(cout, cout, 3, stride, groups=cout // group_width),
            SqueezeExcite(cout, max(1, cin // 4), nn.ReLU),
            conv_bn(cout, cout, 1, act=None))
        self.short = (conv_bn(cin, cout, 1, stride, act=None)
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


REGNETY_400MF_STAGES = ((48, 1), (104, 3), (208, 6), (440, 6))  # (width, blocks); stride 2 each


class RegNetY400MF(PooledClassifier):
    def __init__(self, classes: int = 1000, group_width: int = 8) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 32, 3, 2)]
        cin = 32
        for width, blocks in REGNETY_400MF_STAGES:
            for b in range(blocks):
                layers.append(RegNetYBlock(cin, width, 2 if b == 0 else 1, group_width))
                cin = width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)


# ---- ViT-B/16 ---------------------------------------------------------------------------------
class PreNormLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class ViTB16(nn.Module):
    def __init__(self, classes: int = 1000, layers: int = 12, d: int = 768, heads: int = 12,
                 ff: int = 3072, image: int = 224, patch: int = 16) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d) * 0.02)
        self.layers = nn.Sequential(*(PreNormLayer(d, heads, ff) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patches(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1) + self.pos
        return self.head(self.ln(self.layers(t))[:, 0])


BIG_MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "resnet50": (ResNet50, (1, 3, 224, 224)),
    "mobilenetv2": (MobileNetV2, (1, 3, 224, 224)),
    "bert_encoder": (BertEncoder, (1, 128, 768)),
    "efficientnet_b0": (EfficientNetB0, (1, 3, 224, 224)),
    "regnety_400mf": (RegNetY400MF, (1, 3, 224, 224)),
    "vit_b16": (ViTB16, (1, 3, 224, 224)),
}


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The model in eval mode with seeded random weights (and BN statistics), and an input."""
    make, shape = BIG_MODELS[name]
    torch.manual_seed(0)
    model = make()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # non-trivial statistics that keep activations O(1)
            m.running_mean.normal_(0.0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval(), torch.randn(*shape)


# exports with a symbolic axis: name -> (the model, {input axis: dimension name})
DYNAMIC = {"bert_encoder_seq": ("bert_encoder", {1: "seq"})}


def export(name: str, out_dir: Path = OUT_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.onnx"
    source, axes = DYNAMIC.get(name, (name, {}))
    model, x = build(source)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation notice
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=OPSET,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": axes, "output": axes} if axes else None)
    return path


# int8 forms: name -> the float model they quantize
QUANTIZED = {"resnet50_int8": "resnet50", "mobilenetv2_int8": "mobilenetv2",
             "bert_encoder_int8": "bert_encoder"}


def quantize(name: str, out_dir: Path = OUT_DIR) -> Path:
    """`quantize_static` of the float model (exported first if missing), QDQ format, calibrated
    on seeded random inputs of its input shape."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    src = out_dir / f"{QUANTIZED[name]}.onnx"
    if not src.exists():
        export(QUANTIZED[name], out_dir)
    shape = BIG_MODELS[QUANTIZED[name]][1]
    rng = np.random.default_rng(0)

    class Samples(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"input": rng.standard_normal(shape).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    path = out_dir / f"{name}.onnx"
    logging.getLogger().setLevel(logging.ERROR)  # the pre-processing advice
    quantize_static(str(src), str(path), Samples(), quant_format=QuantFormat.QDQ)
    return path


def big_model_paths(out_dir: Path = OUT_DIR) -> dict[str, Path]:
    return {name: out_dir / f"{name}.onnx" for name in [*BIG_MODELS, *QUANTIZED]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    names = [*BIG_MODELS, *QUANTIZED, *DYNAMIC]
    ap.add_argument("--only", nargs="+", choices=names, default=names)
    args = ap.parse_args()
    for name in args.only:
        path = quantize(name, args.out) if name in QUANTIZED else export(name, args.out)
        print(f"{path}  {path.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
