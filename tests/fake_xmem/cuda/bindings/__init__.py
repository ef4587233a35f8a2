"""Fake cuda.bindings (tests only)."""
