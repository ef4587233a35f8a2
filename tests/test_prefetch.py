"""SGLang HiCache's L3 prefetch (xmemplan/sizing/engine/prefetch.py): the kernel against
its plain-Python reference (reference.PrefetchRef, Hypothesis), and the engine's
admission per --hicache-storage-prefetch-policy on a generated workload."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmemplan.sizing.engine.prefetch import (
    N_PF,
    N_PP,
    PF_DONE,
    PF_LANDED,
    PF_ONGOING,
    PF_STATE,
    PF_TOKENS,
    POLICY_NAMES,
    PP_BASE,
    PP_PAGE,
    PP_PERKI,
    PP_POLICY,
    PP_THRESH,
    pf_plan,
    pf_poll,
    pf_progress,
    pf_start,
)
from xmemplan.sizing.engine.reference import PrefetchRef


@st.composite
def prefetch_cases(draw: Any) -> dict[str, Any]:
    page = draw(st.sampled_from([1, 16, 64]))
    top = draw(st.integers(0, 60_000))
    return {
        "policy": draw(st.sampled_from(POLICY_NAMES)),
        "page": page,
        "threshold": draw(st.sampled_from([0, 1, 256, 1024, 5000])),
        "matched": draw(st.integers(0, top)),
        "top": top,
        "kvb": draw(st.sampled_from([0.0, 1.0, 4096.0, 1e5])),
        "base": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "perki": draw(st.sampled_from([0.0, 0.25, 1.0])),
        # (kind, amount): 0 the reads advance by a share of the span, 1 the span lands,
        # 2 the scheduler polls after a pause (seconds)
        "ops": draw(st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 3.0)),
                             min_size=1, max_size=25)),
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefetch_cases())
def test_prefetch_kernel_matches_reference(c: dict[str, Any]) -> None:
    ref = PrefetchRef(c["policy"], c["page"], c["threshold"], c["base"], c["perki"])
    pf = np.zeros((1, N_PF))
    pfe = np.zeros((8, 2), np.int64)
    pfp = np.zeros(N_PP)
    pfp[PP_POLICY] = POLICY_NAMES.index(c["policy"])
    pfp[PP_THRESH] = c["threshold"]
    pfp[PP_PAGE] = c["page"]
    pfp[PP_BASE] = c["base"]
    pfp[PP_PERKI] = c["perki"]
    tokens = pf_plan(c["matched"], c["top"], c["page"], c["threshold"])
    assert tokens == ref.begin(c["matched"], c["top"])
    if tokens > 0:
        pf_start(pf, 0, c["matched"], tokens)
    now, moved, kvb = 0.0, 0.0, c["kvb"]
    for kind, x in c["ops"]:
        if kind == 0:
            moved = min(moved + x / 3.0 * tokens * kvb, tokens * kvb)
            ref.read(moved, kvb)
            if pf[0, PF_STATE] == PF_ONGOING:
                pf[0, PF_DONE] = pf_progress(int(pf[0, PF_TOKENS]), moved, kvb, c["page"])
        elif kind == 1:
            ref.land()
            if pf[0, PF_STATE] == PF_ONGOING:
                pf[0, PF_STATE] = PF_LANDED
        else:
            now += x
            pfe[0, 0] = 0
            assert tuple(pf_poll(pf, pfe, pfp, 0, now)) == ref.poll(now), (kind, now)


@pytest.mark.parametrize("page", [1, 16, 64])
def test_progress_counts_whole_storage_batches(page: int) -> None:
    """Acknowledged tokens move by 128 pages (STORAGE_BATCH_SIZE), all at the end."""
    batch = 128 * page
    tokens = 4 * batch + page
    kvb = 10.0
    assert pf_progress(tokens, batch * kvb - 1, kvb, page) == 0
    assert pf_progress(tokens, batch * kvb, kvb, page) == batch
    assert pf_progress(tokens, 3.5 * batch * kvb, kvb, page) == 3 * batch
    assert pf_progress(tokens, tokens * kvb, kvb, page) == tokens


def test_plan_keeps_the_threshold_and_pages() -> None:
    assert pf_plan(0, 255, 1, 256) == 0  # under prefetch_threshold: not fetched
    assert pf_plan(0, 256, 1, 256) == 256
    assert pf_plan(100, 1000, 64, 256) == 896  # page-aligned span past the match
    assert pf_plan(0, 40, 64, 0) == 0  # less than a page
