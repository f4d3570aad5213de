"""The path runner (measure layer): the hybrid and layerwise prefill paths of sglang-kt run end to end
on K decoder layers, apart from the micro-probes. `stack` builds the layers, `path_runner` runs a
prompt's forwards, `pipeline` is the layerwise three-stage pipeline those forwards stream experts
through (the pipeline probe times the same mechanism), `session` / `worker` / `tp` host runs,
`api` runs grids and summarises them, `result` is the record, `memory` holds the memory model to
the measured peaks. The cost model's comparisons with the records are kttune.calibration.runner.
"""
