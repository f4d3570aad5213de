"""Exact weight bytes of a checkpoint from its safetensors headers (never the tensor data).

A safetensors file starts with an 8-byte little-endian header length N and N bytes of JSON mapping each
tensor name to `{dtype, shape, data_offsets: [begin, end]}`; `end - begin` is the tensor's exact size.
We sum them per class: routed experts (what KT keeps in host RAM and streams), MTP / next-n layers
(not loaded for plain serving), and everything else (attention, dense MLPs, shared experts, embeddings,
norms, routers, vision towers: what SGLang puts on the GPU).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from kttune.errors import UserError
from kttune.units import MIB

INDEX_NAME = "model.safetensors.index.json"
_MAX_HEADER_BYTES = 256 * MIB  # a real header is a few MB at most

# `.experts.` matches routed experts in every family: DeepSeek/Kimi/GLM/Qwen `mlp.experts.{e}.*`,
# Mixtral/MiniMax `block_sparse_moe.experts.{e}.w1`, gpt-oss fused `mlp.experts.gate_up_proj_blocks`.
# Shared experts (`shared_experts.`, `shared_expert.`) are not preceded by a dot, so they stay out.
_ROUTED_RE = re.compile(r"(?:^|\.)experts\.")
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_MTP_RE = re.compile(r"(?:^|\.)mtp[._]")  # Qwen3-Next `mtp.layers.0...`, `mtp.fc`


def is_routed_expert_tensor(name: str) -> bool:
    """Whether a tensor belongs to a routed expert (shared experts and routers do not)."""
    return bool(_ROUTED_RE.search(name))


def is_mtp_tensor(name: str, num_layers: int | None) -> bool:
    """Whether a tensor belongs to an MTP / next-n layer: layer index >= num_hidden_layers (DeepSeek
    keeps its MTP layer as `model.layers.61`), or an `mtp.` module."""
    if _MTP_RE.search(name):
        return True
    if num_layers is None:
        return False
    m = _LAYER_RE.search(name)
    return bool(m) and int(m.group(1)) >= num_layers


def read_safetensors_header(path: str | Path) -> dict[str, dict]:
    """The JSON header of one safetensors file: tensor name -> {dtype, shape, data_offsets}.
    Reads 8 + N bytes; the `__metadata__` entry is dropped."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise UserError(f"{path}: not a safetensors file (shorter than 8 bytes)", "re-download the file")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER_BYTES:
                raise UserError(f"{path}: not a safetensors file (header length {n})", "re-download the file")
            body = f.read(n)
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}", "check the file permissions") from None
    if len(body) != n:
        raise UserError(f"{path}: truncated safetensors header", "re-download the file")
    try:
        header = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: malformed safetensors header ({e})", "re-download the file") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: malformed safetensors header (not an object)", "re-download the file")
    header.pop("__metadata__", None)
    return header


@dataclass(frozen=True)
class SafetensorsSummary:
    """Byte totals of a checkpoint's tensors by class, from headers only."""

    files: tuple[str, ...]
    tensor_count: int
    non_expert_bytes: int
    non_expert_tensor_count: int
    routed_expert_bytes: int
    routed_expert_tensor_count: int
    mtp_bytes: int  # MTP / next-n layers: neither non-expert nor routed for serving without speculation
    mtp_tensor_count: int

    @property
    def total_bytes(self) -> int:
        return self.non_expert_bytes + self.routed_expert_bytes + self.mtp_bytes


def safetensors_files(model_dir: str | Path) -> list[Path]:
    """The checkpoint's shard files: those the index names when there is one, else `*.safetensors`.
    Raises `UserError` when the index names shards that are missing."""
    d = Path(model_dir)
    index = d / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map") or {}
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
            raise UserError(f"{index}: malformed JSON ({e})", "re-download model.safetensors.index.json") from None
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (d / n).is_file()]
        if missing:
            raise UserError(
                f"{d}: {len(missing)} of {len(names)} safetensors shards named by {INDEX_NAME} are missing "
                f"(first: {missing[0]})",
                "finish the download, or point {model} at a directory holding only config.json",
                params=("model",),
            )
        return [d / n for n in names]
    return sorted(d.glob("*.safetensors"))


def summarize_safetensors(model_dir: str | Path, num_layers: int | None = None) -> SafetensorsSummary | None:
    """Sum the exact bytes of a checkpoint's tensors by class, reading headers only. `num_layers`
    (num_hidden_layers) lets layers past it count as MTP. None when the directory holds no shards."""
    files = safetensors_files(model_dir)
    if not files:
        return None
    count = ne_b = ne_n = ro_b = ro_n = mtp_b = mtp_n = 0
    for path in files:
        for name, info in read_safetensors_header(path).items():
            try:
                begin, end = info["data_offsets"]
                size = int(end) - int(begin)
            except (KeyError, TypeError, ValueError):
                raise UserError(f"{path}: tensor {name!r} has no valid data_offsets", "re-download the file") from None
            count += 1
            if is_mtp_tensor(name, num_layers):
                mtp_b, mtp_n = mtp_b + size, mtp_n + 1
            elif is_routed_expert_tensor(name):
                ro_b, ro_n = ro_b + size, ro_n + 1
            else:
                ne_b, ne_n = ne_b + size, ne_n + 1
    return SafetensorsSummary(
        files=tuple(str(p) for p in files),
        tensor_count=count,
        non_expert_bytes=ne_b,
        non_expert_tensor_count=ne_n,
        routed_expert_bytes=ro_b,
        routed_expert_tensor_count=ro_n,
        mtp_bytes=mtp_b,
        mtp_tensor_count=mtp_n,
    )
