"""The OpInfo conformance sweep: PyTorch's op database on rbln against CPU."""
