"""ADAPTER (to finish when the path runner lands): the path runner as the measured search's
`Evaluator` (kttune.search.measured). Lives outside the search core, which never imports probes.

The runner (`kttune paths`, in kttune.probes) runs hybrid/layerwise prefill for a launch
configuration over prompt lengths and returns measured ms per length. Until a runner entry point
is importable, asking for it is a one-line error that names the fallback."""

from __future__ import annotations

import importlib

from kttune.errors import UserError

# where the runner's library function is expected: (module, function); the first that imports wins
RUNNER_ENTRY_POINTS = (("kttune.probes.paths", "measure_prefill_ms"), ("kttune.probes.path_runner", "measure_prefill_ms"))


class PathRunnerEvaluator:
    def __init__(self, fn, inp, device: str) -> None:
        self._fn, self._inp, self.device = fn, inp, device
        self.name = f"runner-{device}"

    def measure(self, cfg, lengths):
        r = self._inp.request
        out = self._fn(r.model, cfg, list(lengths), device=self.device, profile=r.profile)
        return {int(n): float(out[n]) for n in lengths}


def path_runner_evaluator(inp, device: str = "cuda") -> PathRunnerEvaluator:
    for mod, fn in RUNNER_ENTRY_POINTS:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue
            raise
        if hasattr(m, fn):
            return PathRunnerEvaluator(getattr(m, fn), inp, device)
    raise UserError("the path runner is not available in this kttune (no kttune.probes.paths)",
                    "use --evaluator model for a dry run of the measured search, or update kttune")
