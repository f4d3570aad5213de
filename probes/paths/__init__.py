"""The path runner: the hybrid and layerwise prefill paths of sglang-kt run end to end on K decoder
layers (`stack` builds them, `runner` runs prompts, `result` is the record, `compare` holds the
cost and memory models to the records)."""
