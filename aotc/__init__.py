"""aotc: an ahead-of-time compiler for ONNX models."""

__version__ = "0.1.0"
