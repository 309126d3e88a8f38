"""Neural-network operators: convolution, pooling, normalisation, padding and resampling."""
