"""Thin Typer layer: one module per command. Parse flags, call the library, render.

Modules here import only typer and the standard library at top level, so `--help` stays
fast; library modules (numba, polars) are imported inside the command functions.
"""
