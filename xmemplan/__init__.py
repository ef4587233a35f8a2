"""xmemplan: size tiered KV-cache memory for LLM serving of coding agents.

Library first: every CLI command is one call into a function of this package that returns
a dataclass (`xmemplan.hitrate.analyze`, ...). Importing this package is cheap: heavy
modules (numba, polars) are imported by the functions that need them.
"""

__version__ = "0.1.0"
