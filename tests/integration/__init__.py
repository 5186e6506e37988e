"""Tests that run more than one function call: several processes or devices, a browser on the built book,
data streamed from disk, the stored experiments and the benchmark configurations."""
