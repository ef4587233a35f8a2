"""The `validate` stage: real KV pages through a HiCache backend, measured against the model.

Modules: `harness` (the run, steps 1-4, the result), `replay` (backends and the lock-step
replay), `verdict` (predictions, classes, verdict), `workload` (the requests replayed),
`pages` (host pool and checkable page contents), `probe` (measurements of the machine at
hand), `aiperf` (AIPerf's per-request records judged), `points` (measured points for
`xmemplan calibrate`).
"""
