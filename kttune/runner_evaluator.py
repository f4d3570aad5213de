"""ADAPTER between the path runner (`kttune paths`, kttune.probes.paths) and the measured search's
`Evaluator` protocol (kttune.search.measured). It lives outside the search core, which never
imports probes.

The runner's library call is `kttune.probes.paths.api.run_paths(PathsRequest(...))`: it builds K
decoder layers of the model for one GPU-expert count and runs prompts through the real hybrid and
layerwise paths; each run's `extrapolated_ms` is the whole model's prefill time. Building the layers
is the expensive part, so the adapter measures all of the workload's lengths for a configuration in
one call and answers the search's one-length-at-a-time calls from that (the protocol allows it).
A length the runner skips (over its time cap, or larger than its buffers) is left out of the answer,
and the search records the trial as not measurable.

Until kttune.probes.paths is importable, asking for the runner is a one-line error naming the
fallback (`--evaluator model`)."""

from __future__ import annotations

import importlib
from typing import Sequence

from kttune.config import LaunchConfig
from kttune.errors import UserError

RUNNER_MODULE = "kttune.probes.paths.api"


class PathRunnerEvaluator:
    def __init__(self, api, inp, device: str, layers: int = 2, max_run_s: float = 600.0) -> None:
        self._api, self._inp, self.device, self.layers, self.max_run_s = api, inp, device, layers, max_run_s
        self.name = f"runner-{device}"
        self._cache: dict[LaunchConfig, dict[int, float]] = {}
        self.skipped: dict[LaunchConfig, list[dict]] = {}

    def _model_arg(self) -> str:
        import os

        m = self._inp.request.model
        return m.source if os.path.isdir(m.source) else m.name

    def measure(self, cfg: LaunchConfig, lengths: Sequence[int]) -> dict[int, float]:
        want = sorted(set(self._inp.request.workload.prompt_tokens) | set(lengths))
        have = self._cache.setdefault(cfg, {})
        todo = [n for n in want if n not in have] if not set(lengths) <= set(have) else []
        if todo:
            req = self._api.PathsRequest(
                model=self._model_arg(), method=cfg.method, layers=self.layers, gpu_experts=(cfg.num_gpu_experts,),
                chunks=(cfg.chunked_prefill_size,), prompts=tuple(todo), threshold=cfg.gpu_prefill_token_threshold,
                cpuinfer=cfg.cpuinfer_threads, device=self.device, small=self.device == "cpu",
                max_run_s=self.max_run_s, profile=None)
            res = self._api.run_paths(req)
            for run in res.runs:
                if run.forced_path is None:
                    have[run.prompt_tokens] = float(run.extrapolated_ms)
            self.skipped.setdefault(cfg, []).extend(res.skipped)
        return {n: have[n] for n in lengths if n in have}


def path_runner_evaluator(inp, device: str = "cuda") -> PathRunnerEvaluator:
    from kttune.extras import require

    require("torch", f"--evaluator {'runner-cpu' if device == 'cpu' else 'runner'} (the path runner)")
    try:
        api = importlib.import_module(RUNNER_MODULE)
    except ModuleNotFoundError as e:
        if e.name and RUNNER_MODULE.startswith(e.name):
            raise UserError("the path runner is not available in this kttune (no kttune.probes.paths)",
                            "use --evaluator model for a dry run of the measured search, or update kttune") from None
        raise
    return PathRunnerEvaluator(api, inp, device)
