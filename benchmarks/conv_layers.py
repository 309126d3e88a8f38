"""The distinct convolution layers of ResNet-50 (v1.5) and MobileNetV2 at batch 1, 224x224, as
data: what bench_ops times one by one. `count` is how often the layer occurs in the network, so
count-weighted sums give each network's total convolution time. Written from forward hooks on the
models in make_big_models.py; tests/test_benchmarks_smoke.py checks the two still agree.
"""

from __future__ import annotations

from typing import NamedTuple


class ConvLayer(NamedTuple):
    cin: int
    cout: int
    k: int
    stride: int
    hw: int  # input height = width
    groups: int
    count: int

    @property
    def out_hw(self) -> int:
        return (self.hw + 2 * (self.k // 2) - self.k) // self.stride + 1

    @property
    def flops(self) -> int:
        """2 x multiply-adds of one run (bias excluded)."""
        return 2 * self.cout * self.out_hw ** 2 * (self.cin // self.groups) * self.k * self.k

    def name(self, net: str) -> str:
        kind = f"dw{self.cin}" if self.groups == self.cin > 1 else f"{self.cin}x{self.cout}"
        return f"{net}.{kind}.k{self.k}s{self.stride}.{self.hw}"


RESNET50_CONVS = (
    # cin, cout, k, stride, hw, groups, count
    ConvLayer(3, 64, 7, 2, 224, 1, 1),
    ConvLayer(64, 64, 1, 1, 56, 1, 1),
    ConvLayer(64, 64, 3, 1, 56, 1, 3),
    ConvLayer(64, 256, 1, 1, 56, 1, 4),
    ConvLayer(256, 64, 1, 1, 56, 1, 2),
    ConvLayer(256, 128, 1, 1, 56, 1, 1),
    ConvLayer(128, 128, 3, 2, 56, 1, 1),
    ConvLayer(128, 512, 1, 1, 28, 1, 4),
    ConvLayer(256, 512, 1, 2, 56, 1, 1),
    ConvLayer(512, 128, 1, 1, 28, 1, 3),
    ConvLayer(128, 128, 3, 1, 28, 1, 3),
    ConvLayer(512, 256, 1, 1, 28, 1, 1),
    ConvLayer(256, 256, 3, 2, 28, 1, 1),
    ConvLayer(256, 1024, 1, 1, 14, 1, 6),
    ConvLayer(512, 1024, 1, 2, 28, 1, 1),
    ConvLayer(1024, 256, 1, 1, 14, 1, 5),
    ConvLayer(256, 256, 3, 1, 14, 1, 5),
    ConvLayer(1024, 512, 1, 1, 14, 1, 1),
    ConvLayer(512, 512, 3, 2, 14, 1, 1),
    ConvLayer(512, 2048, 1, 1, 7, 1, 3),
    ConvLayer(1024, 2048, 1, 2, 14, 1, 1),
    ConvLayer(2048, 512, 1, 1, 7, 1, 2),
    ConvLayer(512, 512, 3, 1, 7, 1, 2),
)
MOBILENETV2_CONVS = (
    # cin, cout, k, stride, hw, groups, count
    ConvLayer(3, 32, 3, 2, 224, 1, 1),
    ConvLayer(32, 32, 3, 1, 112, 32, 1),
    ConvLayer(32, 16, 1, 1, 112, 1, 1),
    ConvLayer(16, 96, 1, 1, 112, 1, 1),
    ConvLayer(96, 96, 3, 2, 112, 96, 1),
    ConvLayer(96, 24, 1, 1, 56, 1, 1),
    ConvLayer(24, 144, 1, 1, 56, 1, 2),
    ConvLayer(144, 144, 3, 1, 56, 144, 1),
    ConvLayer(144, 24, 1, 1, 56, 1, 1),
    ConvLayer(144, 144, 3, 2, 56, 144, 1),
    ConvLayer(144, 32, 1, 1, 28, 1, 1),
    ConvLayer(32, 192, 1, 1, 28, 1, 3),
    ConvLayer(192, 192, 3, 1, 28, 192, 2),
    ConvLayer(192, 32, 1, 1, 28, 1, 2),
    ConvLayer(192, 192, 3, 2, 28, 192, 1),
    ConvLayer(192, 64, 1, 1, 14, 1, 1),
    ConvLayer(64, 384, 1, 1, 14, 1, 4),
    ConvLayer(384, 384, 3, 1, 14, 384, 4),
    ConvLayer(384, 64, 1, 1, 14, 1, 3),
    ConvLayer(384, 96, 1, 1, 14, 1, 1),
    ConvLayer(96, 576, 1, 1, 14, 1, 3),
    ConvLayer(576, 576, 3, 1, 14, 576, 2),
    ConvLayer(576, 96, 1, 1, 14, 1, 2),
    ConvLayer(576, 576, 3, 2, 14, 576, 1),
    ConvLayer(576, 160, 1, 1, 7, 1, 1),
    ConvLayer(160, 960, 1, 1, 7, 1, 3),
    ConvLayer(960, 960, 3, 1, 7, 960, 3),
    ConvLayer(960, 160, 1, 1, 7, 1, 2),
    ConvLayer(960, 320, 1, 1, 7, 1, 1),
    ConvLayer(320, 1280, 1, 1, 7, 1, 1),
)
