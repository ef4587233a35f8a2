"""The `validate` stage: real KV pages through a HiCache backend, measured against the model.

Modules: `harness` (the run and its verdict), `workload` (the requests replayed), `pages`
(host pool and checkable page contents), `probe` (measurements of the machine at hand).
"""
