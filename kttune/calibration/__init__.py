"""The model held to measurements, and the corrections fitted from them (core: no torch, no rendering):

- `entries`: the typed calibration (per-path, per-method factors on the MoE-layer time) and its fit;
  the cost model applies it, the profile stores it. Imports no other model package.
- `runner`: the cost model against path-runner records (per forward, the crossover, transfer points).
- `server`: the cost model against a running server's TTFT and KT's layerwise log lines, as entries.
- `transfer`: corrections that must hold for models and shapes they were not fitted on, and their
  held-out errors.
"""
