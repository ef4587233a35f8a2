"""Fake cuda-python package (tests only)."""
