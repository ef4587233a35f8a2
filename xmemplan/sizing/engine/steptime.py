"""The time of one engine step (numba): a roofline per operator class plus the engine's
overheads. `steptime_reference` is the same formula in plain Python.

A step schedules pieces (request, k new tokens, s0 tokens already in KV); a decode is
k = 1. Over the step's pieces:
- linear work lin x sum(k), attention attn x sum((s0 + k)^2 - s0^2), KV read
  sum(s0 + k) x KV bytes per token;
- weights read D + E x (1 - m^T) bytes (T = sum(k): a MoE reads more experts as the batch
  grows, model.active_weight_bytes);
- compute = max(linear FLOP time, weight byte time) + max(attention FLOP time, KV byte
  time) (model.compute_parts) + the MoE kernels' fixed time of a pass (T_MOE: routing,
  block alignment, the expert GEMMs' launches and tails) + the tensor-parallel all-reduces
  of a pass (T_COMM0 + T_COMM1 x T: their latency, and the activations over the link);
- the layer floor of a forward pass (pass floor when the step holds a prefill piece,
  decode floor else): under the "add" rule an overhead on top of the compute, under the
  "max" rule the pass's minimum, max(compute, floor) (`pass_time`);
- overheads: the engine's per step (base), per scheduled token and per scheduled request
  (fitted, docs/model.md); the model's per-request start cost t0 (once, in the step where
  a request's prefill starts) and per-prompt-token overhead.
"""

from __future__ import annotations

from xmemplan.prefix.kernels import no_runtime

# fields of the step-time parameter vector
(T_LIN, T_ATTN, T_WDENSE, T_WEXP, T_MISS, T_HBM, T_KVB, T_T0, T_TOKOVH, T_PASS, T_DEC,
 T_BASE, T_PER_TOK, T_PER_SEQ, T_MOE, T_FLOOR_MAX, T_COMM0, T_COMM1) = range(18)
N_T = 18


@no_runtime
def compute_time(tokens, lin_t, attn_t, kv_read, tp):  # noqa: ANN001, ANN201
    """Roofline of one pass: linear and attention, each the larger of FLOP and byte time."""
    wb = tp[T_WDENSE] + tp[T_WEXP] * (1.0 - tp[T_MISS] ** tokens) if tokens > 0 else 0.0
    w_t = wb / tp[T_HBM]
    kv_t = kv_read / tp[T_HBM]
    moe = tp[T_MOE] + tp[T_COMM0] + tp[T_COMM1] * tokens if tokens > 0 else 0.0
    return (lin_t if lin_t >= w_t else w_t) + (attn_t if attn_t >= kv_t else kv_t) + moe


@no_runtime
def pass_time(comp, prefill, tp):  # noqa: ANN001, ANN201
    """The pass's compute with its layer floor as a minimum (floor rule "max"): a pass is
    never faster than its chain of latency-bound kernels; under the "add" rule the floor
    is an overhead (overhead_time) and the compute is returned as it is."""
    if tp[T_FLOOR_MAX] == 0.0:
        return comp
    f = tp[T_PASS] if prefill else tp[T_DEC]
    return comp if comp >= f else f


@no_runtime
def overhead_time(tokens, nseq, prefill, starts, start_tokens, tp):  # noqa: ANN001, ANN201
    """The step's fixed costs (see the module doc). `prefill`: a piece of a prompt is in the
    step; `starts`: requests whose prefill starts now, holding `start_tokens` prompt tokens."""
    f = tp[T_BASE] + tp[T_PER_TOK] * tokens + tp[T_PER_SEQ] * nseq
    add = tp[T_FLOOR_MAX] == 0.0
    if prefill:
        if add:
            f += tp[T_PASS]
        if starts > 0:
            f += tp[T_T0] + tp[T_TOKOVH] * start_tokens
    elif add:
        f += tp[T_DEC]
    return f


def steptime_reference(pieces: list[tuple[float, float, bool, bool, float]],
                       tp: list[float]) -> tuple[float, float]:
    """(compute, overhead) of a step of pieces (k, s0, is_prefill, starts, prompt); the
    compute is the pass's (the floor as its minimum under the "max" rule)."""
    tokens = sum(k for k, *_ in pieces)
    lin_t = sum(tp[T_LIN] * k for k, *_ in pieces)
    attn_t = sum(tp[T_ATTN] * ((s0 + k) * (s0 + k) - s0 * s0) for k, s0, *_ in pieces)
    kv = sum((s0 + k) * tp[T_KVB] for k, s0, *_ in pieces)
    wb = tp[T_WDENSE] + tp[T_WEXP] * (1.0 - tp[T_MISS] ** tokens) if tokens > 0 else 0.0
    comp = max(lin_t, wb / tp[T_HBM]) + max(attn_t, kv / tp[T_HBM])
    comp += tp[T_MOE] + tp[T_COMM0] + tp[T_COMM1] * tokens if tokens > 0 else 0.0
    prefill = any(p for _, _, p, _, _ in pieces)
    floor = tp[T_PASS] if prefill else tp[T_DEC]
    starts = [pr for _, _, _, s, pr in pieces if s]
    f = tp[T_BASE] + tp[T_PER_TOK] * tokens + tp[T_PER_SEQ] * len(pieces)
    if prefill and starts:
        f += tp[T_T0] + tp[T_TOKOVH] * sum(starts)
    if tp[T_FLOOR_MAX]:
        comp = max(comp, floor)
    else:
        f += floor
    return comp, f
