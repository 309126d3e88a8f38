"""Template schedule spaces: kernels for computations of a recognised structure."""
