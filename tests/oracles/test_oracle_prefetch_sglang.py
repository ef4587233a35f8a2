"""Issue 19, SGLang HiCache L3 prefetch: the engine's prefetch kernel
(xmemplan/sizing/engine/prefetch.py) against SGLang 0.5.23's own decision code.

Generated cases, each policy: the span `prefetch_from_storage` fetches (page alignment,
threshold), the tokens acknowledged as the reads progress (SGLang's `_page_transfer`
batches), and every admission poll's verdict and the prefix the request then has
(`check_prefetch_progress` through `_can_terminate_prefetch` and the timeout's timer), on
the same sequence of reads, landings and polls (oracle_drivers/prefetch_sglang.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from oracle_drivers import prefetch_sglang
from oracle_support import xmemplan_side

POLICIES = ("best_effort", "wait_complete", "timeout")


def _case(seed: int) -> dict:
    rng = random.Random(seed)
    page = rng.choice([1, 16, 64])
    top = rng.randint(0, 40_000)
    return {"policy": POLICIES[seed % 3], "page": page,
            "threshold": rng.choice([0, 256, 1024, 4096]), "top": top,
            "matched": rng.randint(0, top), "kvb": rng.choice([1.0, 4096.0, 98304.0]),
            "base": rng.choice([0.0, 0.5, 1.0]), "perki": rng.choice([0.0, 0.25, 1.0]),
            "ops": [(rng.randint(0, 2), rng.uniform(0.0, 3.0))
                    for _ in range(rng.randint(1, 20))]}


@pytest.mark.parametrize("seed", range(90))
def test_prefetch_decisions_match_sglang(sglang_engine: None, seed: int) -> None:
    k = {n: xmemplan_side("xmemplan.sizing.engine.prefetch", n) for n in (
        "N_PF", "N_PP", "PF_DONE", "PF_LANDED", "PF_ONGOING", "PF_STATE", "PF_TOKENS",
        "POLICY_NAMES", "PP_BASE", "PP_PAGE", "PP_PERKI", "PP_POLICY", "PP_THRESH",
        "pf_plan", "pf_poll", "pf_progress", "pf_start")}
    c = _case(seed)
    page, kvb = c["page"], c["kvb"]
    ours = int(k["pf_plan"](c["matched"], c["top"], page, c["threshold"]))
    theirs = prefetch_sglang.span(c["matched"], c["top"], page, c["threshold"])
    assert ours == theirs, f"span: xmemplan {ours}, SGLang {theirs}"
    tokens = ours
    acks = prefetch_sglang.acks(tokens, page) if tokens > 0 else []
    sg = prefetch_sglang.Prefetch(c["policy"], page, max(c["threshold"], page), c["base"],
                                  c["perki"], c["matched"], tokens)
    pf = np.zeros((1, k["N_PF"]))
    pfe = np.zeros((8, 2), np.int64)
    pfp = np.zeros(k["N_PP"])
    pfp[k["PP_POLICY"]] = k["POLICY_NAMES"].index(c["policy"])
    pfp[k["PP_THRESH"]] = c["threshold"]
    pfp[k["PP_PAGE"]] = page
    pfp[k["PP_BASE"]] = c["base"]
    pfp[k["PP_PERKI"]] = c["perki"]
    if tokens > 0:
        k["pf_start"](pf, 0, c["matched"], tokens)
    now, moved = 0.0, 0.0
    for step, (kind, x) in enumerate(c["ops"]):
        if kind == 0:
            moved = min(moved + x / 3.0 * tokens * kvb, tokens * kvb)
            # the acks whose batches the reads have moved (the I/O's timing is ours)
            sg.read(max([a for a in acks if a * kvb <= moved], default=0))
            if pf[0, k["PF_STATE"]] == k["PF_ONGOING"]:
                pf[0, k["PF_DONE"]] = k["pf_progress"](tokens, moved, kvb, page)
                done = max([a for a in acks if a * kvb <= moved], default=0)
                assert pf[0, k["PF_DONE"]] == done, f"op {step}: acknowledged tokens"
        elif kind == 1:
            sg.land()
            if pf[0, k["PF_STATE"]] == k["PF_ONGOING"]:
                pf[0, k["PF_STATE"]] = k["PF_LANDED"]
        else:
            now += x
            pfe[0, 0] = 0
            mine = tuple(k["pf_poll"](pf, pfe, pfp, 0, now))
            assert mine == sg.poll(now), f"op {step} (poll at {now:.3f} s): {c}"


@pytest.mark.parametrize("page", [1, 16, 64])
def test_acks_are_whole_storage_batches(sglang_engine: None, page: int) -> None:
    """SGLang reads 128 pages a batch and acknowledges each (STORAGE_BATCH_SIZE)."""
    tokens = 128 * page * 3 + 2 * page
    assert prefetch_sglang.acks(tokens, page) == [128 * page, 256 * page, 384 * page, tokens]
