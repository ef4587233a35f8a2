"""API- or engine-reported hit ratios beside the ones xmemplan reconstructs, per session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.traces import schema as S

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import Replayed


def reported_vs_reconstructed(
    codes: np.ndarray, replayed: Replayed, hit: np.ndarray, prompt: np.ndarray
) -> dict[str, Any] | None:
    """API- or engine-reported hit ratios beside the reconstructed ones, on the same requests."""
    cached = replayed.column(S.REPORTED_CACHED_TOKENS)
    rprompt = replayed.column(S.REPORTED_PROMPT_TOKENS)
    has = (cached >= 0) & (rprompt > 0)
    if not has.any():
        return None
    rep = float(cached[has].sum()) / float(rprompt[has].sum())
    ours = float(hit[has].sum()) / float(max(prompt[has].sum(), 1))
    sessions = []
    names: dict[int, str] = {}
    for s, c in zip(replayed.session_id, codes):
        names.setdefault(int(c), s)
    for c in np.unique(codes[has]):
        sel = has & (codes == c)
        r = float(cached[sel].sum()) / float(rprompt[sel].sum())
        o = float(hit[sel].sum()) / float(max(prompt[sel].sum(), 1))
        sessions.append(
            {
                "session_id": names[int(c)],
                "requests": int(sel.sum()),
                "reported_token_hit_ratio": r,
                "reconstructed_token_hit_ratio": o,
                "difference": o - r,
            }
        )
    return {
        "requests": int(has.sum()),
        "reported_token_hit_ratio": rep,
        "reconstructed_token_hit_ratio": ours,
        "difference": ours - rep,
        "sessions": sessions,
    }
