"""Hardware and model catalog: data files with sources, read into frozen records.

    from xmemplan.catalog import load_catalog
    cat = load_catalog()
    cat.model("qwen3-30b-a3b").kv_bytes_per_token   # 98304
    cat.tier("xmem").node_bandwidth_bytes_per_s      # 4e12
"""

from xmemplan.catalog.loader import Catalog, data_dir, load_catalog, shipped_files
from xmemplan.catalog.specs import CalibrationSpec, GpuSpec, ModelSpec, TierSpec

__all__ = [
    "CalibrationSpec",
    "Catalog",
    "GpuSpec",
    "ModelSpec",
    "TierSpec",
    "data_dir",
    "load_catalog",
    "shipped_files",
]
