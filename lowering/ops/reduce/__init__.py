"""Reductions and row normalisations: Reduce*, Softmax/LogSoftmax, LayerNormalization."""
