"""C sources of the aotc runtime, shipped as package data and copied into every bundle."""
