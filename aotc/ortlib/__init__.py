"""`aotc optimize --emit ort`: islands of compiled kernels inside onnxruntime (a rewritten model
and a custom-op library)."""
