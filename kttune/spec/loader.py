"""`--model NAME|PATH` -> `ModelSpec`: a model directory (config.json, plus safetensors headers when
shards are present), a path to a config.json, or a catalog name / HF repo id."""

from __future__ import annotations

import os
from pathlib import Path

from kttune.bounds import read_json_file
from kttune.errors import UserError
from kttune.spec.catalog import (
    catalog_config,
    catalog_meta,
    catalog_source,
    resolve_catalog_name,
    unknown_model_error,
)
from kttune.spec import compressed_attention as compressed
from kttune.spec.hf_config import linear_bytes_per_param, spec_from_config
from kttune.spec.methods import bytes_per_expert, get_method
from kttune.spec.model_spec import ModelSpec
from kttune.spec.safetensors_headers import summarize_safetensors
from kttune.units import GB


def read_config_json(path: Path) -> dict:
    """Parse a config.json under kttune.bounds' JSON limits; anything malformed is a `UserError`
    naming the file. A NaN or Infinity reads as null: transformers writes them (Python's json), in
    keys the models do not read, and a key they read is checked as a number where it is read."""
    config = read_json_file(
        path,
        str(path),
        "point {model} at a HuggingFace config.json (fix the file or download it again)",
        params=("model",),
        nonfinite_as_null=True,
    )
    if not isinstance(config, dict):
        raise UserError(
            f"{path} holds a JSON {type(config).__name__}, not an object",
            "point {model} at a HuggingFace config.json",
            params=("model",),
        )
    return config


def _looks_like_path(s: str) -> bool:
    # An HF repo id has exactly one "/"; anything else with a slash, a ~ or .json is a path.
    return s.startswith(("/", ".", "~")) or s.endswith(".json") or s.rstrip("/").count("/") > 1


def _load_path(path: Path, method: str | None) -> ModelSpec:
    if path.is_dir():
        model_dir, cfg_path = path, path / "config.json"
        if not cfg_path.is_file():
            raise UserError(
                f"no config.json in {path}",
                "point {model} at a HuggingFace model directory (the one holding config.json and *.safetensors), "
                "or at a catalog name (run `kttune models`)",
                params=("model",),
            )
    else:
        model_dir, cfg_path = path.parent, path
    config = read_config_json(cfg_path)
    name = model_dir.resolve().name or str(model_dir)
    spec = spec_from_config(config, name, str(cfg_path if path.is_file() else model_dir), method=method)
    summary = summarize_safetensors(model_dir, spec.num_layers)
    if summary is None:
        note = "no safetensors shards: non-expert bytes estimated from the architecture"
        return spec.with_overrides(notes=spec.notes + (note,))
    notes = list(spec.notes)
    notes.append(
        f"non-expert bytes measured from {len(summary.files)} safetensors header(s): "
        f"{summary.non_expert_bytes / GB:.2f} GB non-expert, {summary.routed_expert_bytes / GB:.2f} GB routed "
        f"experts in {summary.routed_expert_tensor_count} tensors"
        + (f", {summary.mtp_bytes / GB:.2f} GB MTP layers skipped" if summary.mtp_tensor_count else "")
    )
    expected = (
        spec.num_experts
        * spec.num_moe_layers
        * bytes_per_expert(spec.checkpoint_format, spec.hidden_size, spec.moe_intermediate_size)
    )
    if summary.routed_expert_tensor_count and not 0.8 < summary.routed_expert_bytes / expected < 1.25:
        notes.append(
            f"routed-expert bytes on disk ({summary.routed_expert_bytes / GB:.2f} GB) differ from "
            f"{expected / GB:.2f} GB expected for {spec.checkpoint_format}: check quantization_config"
        )
    measured = summary.non_expert_bytes
    if spec.compressed_attention is not None:
        # DeepSeek-V4: SGLang dequantizes wo_a from the checkpoint's fp8 to bf16 (docs/deepseek-v4.md#weights)
        wo_a = compressed.attention_params(
            spec.hidden_size, spec.num_attention_heads, spec.q_lora_rank, spec.compressed_attention
        )["bf16"]
        widened = int(wo_a * spec.num_layers * (2 - linear_bytes_per_param("fp8_block", spec.hidden_size)))
        measured += widened
        notes.append(f"wo_a held in bf16 by SGLang, fp8 on disk: {widened / GB:.2f} GB added to the measured bytes")
    return spec.with_overrides(non_expert_bytes_measured=measured, notes=tuple(notes))


def load_model(name_or_path: str, method: str | None = None) -> ModelSpec:
    """Load a model spec from a directory or config.json path, or from the catalog (name, HF repo id,
    case-insensitive, `_` for `-`). `method` (`--kt-method`) overrides the detected method."""
    if method is not None:
        get_method(method)  # an unknown method fails before any file is read
    query = name_or_path.strip()
    if not query:
        raise UserError(
            "empty {model}", "pass a catalog name (run `kttune models`) or a model directory", params=("model",)
        )
    path = Path(os.path.expanduser(query))
    if path.exists():
        return _load_path(path, method)
    key = resolve_catalog_name(query)
    if key is not None:
        meta = catalog_meta(key)
        spec = spec_from_config(catalog_config(key), key, catalog_source(key), method=method)
        grade = str(meta.get("grade", ""))
        notes = list(spec.notes)
        if "C" in grade:
            notes.append(f"catalog config grade {grade}: partly reconstructed, see `_kttune` notes in {key}.json")
        return spec.with_overrides(notes=tuple(notes))
    if _looks_like_path(query):
        raise UserError(f"no such file or directory: {query}", "check the path to the model directory or config.json")
    raise unknown_model_error(query)
