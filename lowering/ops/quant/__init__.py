"""Quantized operators: QuantizeLinear/DequantizeLinear, DynamicQuantizeLinear, and the integer
products (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) accumulated in int32."""
