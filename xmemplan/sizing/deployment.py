"""What a deployment is made of, apart from the planner: the engines' load paths, the
replica shape from --tp / --ep / --dp-attention, and the HiCache L3 flags. `size` (every
mode) and the `--gpus` load sweep read these; they live here, not in `sizing.request`, so
that the sweep does not import the planner, routing and workload modules it never runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmemplan.catalog.specs import GpuSpec, ModelSpec, TierSpec
from xmemplan.errors import UsageError
from xmemplan.sizing import model as M
from xmemplan.sizing.engine.prefetch import POLICY_NAMES
from xmemplan.sizing.simmodel import (
    HBM_USABLE,
    PREFETCH_DEFAULT,
    XMEM_PATH_STORAGE,
    XMEM_PATHS,
)

if TYPE_CHECKING:
    from xmemplan.catalog.loader import Catalog

ENGINES = {
    # SGLang HiCache: per-layer load events, page 64 layer_first, kernel IO (the Netpreme fork).
    "sglang": ("layer", M.SGLANG_HICACHE, False),
    # vLLM OffloadingConnector: the request waits for its load; contiguous 16-token blocks;
    # V1 schedules running requests (decodes) first in every step.
    "vllm": ("sum", M.VLLM_OFFLOAD, True),
}


def replica_shape(m: ModelSpec, g: GpuSpec, kv_tokens: float, *, tp: int | None = None,
                  ep: int | None = None, dp_attention: bool = False,
                  max_gpus: int = 1024, mem_fraction: float = HBM_USABLE) -> M.Shape:
    """The replica shape from `--tp`, `--ep` and `--dp-attention`, checked to hold the
    weights and the KV of `kv_tokens` in HBM; without --tp/--ep the smallest that does.

    --tp alone: EP = TP for MoE models (SGLang/vLLM expert parallelism over the TP group),
    1 for dense ones; --ep alone: TP = EP. EP must divide TP (expert ranks sit inside the
    TP group)."""
    if ep is not None and ep > 1 and not m.expert_params:
        raise UsageError(f"--ep {ep}: {m.name} has no routed experts",
                         "drop --ep (expert parallelism applies to MoE models)")
    if tp is None and ep is None:
        shape = M.smallest_shape(m, g, kv_tokens, dp_attention=dp_attention,
                                 max_gpus=max_gpus, raise_if_none=False,
                                 usable_fraction=mem_fraction)
        if shape is None:
            big = M.smallest_shape(m, g, kv_tokens, dp_attention=dp_attention,
                                   raise_if_none=False, usable_fraction=mem_fraction)
            raise UsageError(
                f"{m.name} with {kv_tokens:,.0f} tokens of KV does not fit on {g.name} "
                f"replicas of up to --max-gpus {max_gpus:,} GPUs",
                f"raise --max-gpus to {big.gpus:,} or more" if big is not None
                else "use a larger GPU, --kv-dtype fp8 or shorter prompts")
        return shape
    flags = " ".join(f"{f} {v}" for f, v in (("--tp", tp), ("--ep", ep)) if v is not None)
    t = tp if tp is not None else ep
    assert t is not None
    e = ep if ep is not None else (t if m.expert_params else 1)
    if e > t:
        raise UsageError(f"--ep {e} is larger than --tp {t}",
                         "expert ranks sit inside the TP group: use --ep <= --tp")
    if dp_attention and t == 1:
        raise UsageError("--dp-attention needs --tp 2 or more",
                         "attention is data-parallel over the TP ranks of a replica")
    shape = M.Shape(tp=t, ep=e, dp_attention=dp_attention)  # checks that EP divides TP
    if shape.gpus > max_gpus:
        raise UsageError(f"{flags}: a replica of {shape.gpus:,} GPUs is more than "
                         f"--max-gpus {max_gpus:,}", "raise --max-gpus or narrow the shape")
    try:
        M.check_shape(m, g, shape, kv_tokens, usable_fraction=mem_fraction)
    except UsageError as e_:
        raise UsageError(f"{flags}{' --dp-attention' if dp_attention else ''}: "
                         f"{e_.message}", e_.hint) from None
    return shape


# The kinds of tier each option loads from (data/hardware/tiers.toml `kind`): the host-DRAM
# option's tier sits behind the GPU's host side (host DRAM, a remote DRAM store, a local
# drive); the X-Mem option's is a memory node with a node bandwidth shared by its GPUs.
HOST_KINDS = ("host", "rdma", "nvme")
XMEM_KINDS = ("xmem",)


def tier_names(cat: Catalog, kinds: tuple[str, ...]) -> str:
    """The catalog's tiers of these kinds, in catalog order: 'a, b or c'."""
    names = [t.name for t in cat.tiers.values() if t.kind in kinds]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else \
        (names[0] if names else "none")


def resolve_tiers(cat: Catalog, g: GpuSpec, host_tier: str, xmem_tier: str
                  ) -> tuple[TierSpec, TierSpec]:
    """The tiers of the host-DRAM and the X-Mem options from --host-tier and --xmem-tier,
    each refused (UsageError, exit 2) when the catalog gives it another kind: an X-Mem tier
    as --host-tier compared X-Mem with itself, a host tier as --xmem-tier sized host DRAM
    as X-Mem nodes; both used to run. A PCIe host tier on a Grace GPU becomes its C2C one
    (`model.host_tier_for`)."""
    host = M.host_tier_for(cat, g, host_tier)
    xmem = cat.tier(xmem_tier)
    what = f"{host.name}, kind {host.kind}"
    if host.kind == "hbm":  # it was sized as an offload tier holding more HBM
        raise UsageError(f"--host-tier {host_tier} is the GPU's own memory (HBM), which "
                         "every option has", "name a tier the GPUs load from: "
                         f"{tier_names(cat, HOST_KINDS)} (xmemplan catalog tiers)")
    if host.kind not in HOST_KINDS:
        raise UsageError(f"--host-tier {host_tier} is an X-Mem tier ({what}), which the "
                         "xmem option loads from: host DRAM would be compared with X-Mem "
                         "itself", f"name a host tier: {tier_names(cat, HOST_KINDS)} (xmemplan "
                         "catalog tiers); an X-Mem tier goes to --xmem-tier")
    if xmem.kind not in XMEM_KINDS:
        kind = ("the GPU's own memory (HBM), which every option has" if xmem.kind == "hbm"
                else f"{xmem.name}, a tier of kind {xmem.kind}, not an X-Mem memory node")
        raise UsageError(f"--xmem-tier {xmem_tier} is {kind}",
                         f"name an X-Mem tier: {tier_names(cat, XMEM_KINDS)} (xmemplan catalog "
                         "tiers)" + ("; a host tier goes to --host-tier"
                                     if xmem.kind in HOST_KINDS else ""))
    return host, xmem


def hicache_said(engine: str, xmem_path: str, prefetch_policy: str | None
                 ) -> list[tuple[str, str]]:
    """Check --xmem-path and --hicache-storage-prefetch-policy; the assumption lines they
    add (none for the default direct path, so that default answers are unchanged)."""
    if xmem_path not in XMEM_PATHS:
        raise UsageError(f"unknown --xmem-path '{xmem_path}'", "use " + " or ".join(XMEM_PATHS))
    if prefetch_policy is not None and prefetch_policy not in POLICY_NAMES:
        raise UsageError(f"unknown --hicache-storage-prefetch-policy '{prefetch_policy}'",
                         "use " + ", ".join(POLICY_NAMES))
    if xmem_path != XMEM_PATH_STORAGE:
        if prefetch_policy is not None:
            raise UsageError("--hicache-storage-prefetch-policy needs --xmem-path "
                             "hicache-storage", "add --xmem-path hicache-storage")
        return []
    if any(e.strip() != "sglang" for e in engine.split(",")):
        raise UsageError("--xmem-path hicache-storage is SGLang HiCache's L3 storage",
                         "use --engine sglang")
    pol = prefetch_policy or PREFETCH_DEFAULT
    return [(f"X-Mem through the HiCache storage backend (L3): a prefix only X-Mem holds is "
             f"prefetched to host DRAM while the request waits, admitted by "
             f"--hicache-storage-prefetch-policy {pol}, then loaded host -> GPU",
             "flag (--xmem-path)" if prefetch_policy is None
             else "flags (--xmem-path, --hicache-storage-prefetch-policy)")]
