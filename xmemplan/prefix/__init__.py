"""Prefix matching: a readable reference trie (the oracle), numba kernels, and the driver."""
