"""The built-in model catalog: public HF config.json copies shipped in `profiles/models/<name>.json`.

Each file is the raw config.json plus a `_kttune` block (name, hf_repo, aliases, provenance grade,
source, notes). Grades follow docs/model-configs.md#catalog-grades: A = verbatim config copy, B = official excerpt or
third-party copy, C = reconstructed.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files

from kttune.errors import UserError

CATALOG_KEY = "_kttune"


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    hf_repo: str
    family: str  # HF model_type of the language model
    total_params: int  # routed experts + non-expert estimate (MTP layers excluded)
    active_params: int  # per token: non-expert + top_k routed experts per MoE layer
    num_experts: int
    top_k: int
    num_moe_layers: int
    checkpoint_format: str
    default_method: str
    grade: str  # provenance grade of the config copy (A/B/C, docs/model-configs.md#catalog-grades)
    source: str


def _models_dir():
    return files("kttune.profiles") / "models"


@lru_cache(maxsize=1)
def _raw_catalog() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in _models_dir().iterdir():
        if not f.name.endswith(".json"):
            continue
        doc = json.loads(f.read_text(encoding="utf-8"))
        meta = doc.get(CATALOG_KEY) or {}
        out[meta.get("name") or f.name[: -len(".json")]] = doc
    return dict(sorted(out.items()))


def normalize_model_name(s: str) -> str:
    """Case-insensitive, `_` same as `-`, surrounding space ignored."""
    return s.strip().lower().replace("_", "-")


@lru_cache(maxsize=1)
def _aliases() -> dict[str, str]:
    """Every accepted spelling -> catalog name: the name, the HF repo id, its basename, the display
    name and any listed aliases."""
    out: dict[str, str] = {}
    for name, doc in _raw_catalog().items():
        meta = doc.get(CATALOG_KEY) or {}
        keys = [name, meta.get("model", ""), *meta.get("aliases", [])]
        repo = meta.get("hf_repo", "")
        if repo:
            keys += [repo, repo.split("/")[-1]]
        for k in keys:
            if k:
                out.setdefault(normalize_model_name(k), name)
    return out


def catalog_names() -> list[str]:
    return list(_raw_catalog())


def resolve_catalog_name(query: str) -> str | None:
    """The catalog name a user's spelling refers to, or None."""
    return _aliases().get(normalize_model_name(query))


def close_catalog_names(query: str, n: int = 3) -> list[str]:
    """Catalog names close to a misspelled query (difflib), best first."""
    aliases = _aliases()
    hits = difflib.get_close_matches(normalize_model_name(query), list(aliases), n=n * 3, cutoff=0.5)
    out: list[str] = []
    for h in hits:
        if aliases[h] not in out:
            out.append(aliases[h])
    return out[:n]


def unknown_model_error(query: str) -> UserError:
    close = close_catalog_names(query)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return UserError(
        f"unknown model {query!r}",
        f"{hint}run `kttune models` for the catalog, or pass a model directory holding config.json",
    )


def catalog_meta(name: str) -> dict:
    """The `_kttune` block of a catalog entry (name, hf_repo, grade, source, notes, ...)."""
    key = resolve_catalog_name(name)
    if key is None:
        raise unknown_model_error(name)
    return dict(_raw_catalog()[key].get(CATALOG_KEY) or {})


def catalog_config(name: str) -> dict:
    """The raw HF config.json of a catalog entry (without the `_kttune` block); a fresh copy."""
    key = resolve_catalog_name(name)
    if key is None:
        raise unknown_model_error(name)
    doc = _raw_catalog()[key]
    return json.loads(json.dumps({k: v for k, v in doc.items() if k != CATALOG_KEY}))


def catalog_source(name: str) -> str:
    meta = catalog_meta(name)
    return f"catalog:{meta.get('name', name)} ({meta.get('hf_repo', '?')}, grade {meta.get('grade', '?')})"


def catalog_entries() -> list[CatalogEntry]:
    from kttune.spec.hf_config import spec_from_config  # the reader imports nothing of the catalog

    out = []
    for name in catalog_names():
        meta = catalog_meta(name)
        spec = spec_from_config(catalog_config(name), name, catalog_source(name))
        routed_per_layer = spec.params_per_expert * spec.num_moe_layers
        out.append(
            CatalogEntry(
                name=name,
                hf_repo=meta.get("hf_repo", ""),
                family=spec.family,
                total_params=spec.non_expert_params_estimate + spec.num_experts * routed_per_layer,
                active_params=spec.non_expert_params_estimate + spec.top_k * routed_per_layer,
                num_experts=spec.num_experts,
                top_k=spec.top_k,
                num_moe_layers=spec.num_moe_layers,
                checkpoint_format=spec.checkpoint_format,
                default_method=spec.default_method,
                grade=str(meta.get("grade", "")),
                source=str(meta.get("source", "")),
            )
        )
    return out
