"""A scheduler-side KV connector for the vLLM oracle (docs/oracles.md, part B with a tier).

vLLM 0.33 loads a custom connector by name from a module path (`KVTransferConfig(
kv_connector="OracleTierConnector", kv_connector_module_path=
"oracle_drivers.tier_connector")`, `KVConnectorFactory.get_connector_class`); the
`Scheduler` builds it with role SCHEDULER and asks it, for each waiting request it looks
up, how many tokens past its local (HBM) hit the external store holds
(`get_num_new_matched_tokens`). This one answers from the scenario: the prefix the tier
holds for that request (`tier_tokens`), past the tokens already computed, at most the
request's tokens, in whole blocks, loaded asynchronously (as vLLM's
OffloadingConnector does for a CPU tier; xmemplan's engine: policy.vllm_schedule). The
loads themselves never run here: the driver reports them done in the step the engine's
trace says they land (`KVConnectorOutput.finished_recving`).

The connector records each load it is asked to start (`update_state_after_alloc` with
external tokens), which the driver turns into the step's `loads`. No delayed free, no
worker side (the worker-side methods are never called on the scheduler's connector).
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)


class OracleTierMetadata(KVConnectorMetadata):
    """Nothing travels to a worker: the loads are the engine's."""


class OracleTierConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.block_size = int(vllm_config.cache_config.block_size)
        self.tier_tokens: dict[str, int] = {}  # set by the driver, per request id
        self.started: list[tuple[str, int]] = []  # loads asked for, (request id, tokens)

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a best-effort cache, as the OffloadingConnector

    # -- scheduler side -------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        # up to the whole prompt, as the OffloadingConnector's lookup for full-attention
        # groups (offloading/scheduler.py _lookup_complete_chunks: max_hit_size_tokens
        # starts at num_tokens, less 1 only with sliding-window groups); vLLM computes a
        # whole prompt's last token again once it lands (_update_waiting_for_remote_kv)
        top = min(self.tier_tokens.get(request.request_id, 0), request.num_tokens)
        ext = max(0, top - num_computed_tokens) // self.block_size * self.block_size
        return ext, ext > 0

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        if num_external_tokens > 0:
            self.started.append((request.request_id, int(num_external_tokens)))

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return OracleTierMetadata()

    def request_finished(self, request: Any, block_ids: list[int]
                         ) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    # -- worker side: never called on the scheduler's connector ---------------------------
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise NotImplementedError("scheduler-side connector only")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError("scheduler-side connector only")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        raise NotImplementedError("scheduler-side connector only")

    def wait_for_save(self) -> None:
        raise NotImplementedError("scheduler-side connector only")
