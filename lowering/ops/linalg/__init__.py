"""Matrix products: MatMul and Gemm as one reduction over k, transposes as index remaps."""
