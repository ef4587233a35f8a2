"""The defaults every command shares: the seed scenario of Netpreme's X-Mem blog.

Qwen3-30B-A3B-FP8 on an H100-class GPU, 64Ki-token prompts, hit ratio 0.98 (DESIGN.md,
research/perf-model.md). `size`, `validate` and the docs take them from here, so that the
commands cannot disagree about what they assume.
"""

SEED_MODEL = "qwen3-30b-a3b-fp8"
SEED_GPU = "h100-sxm"
SEED_PROMPT_TOKENS = 65_536
SEED_HIT_RATE = 0.98
