"""Where benchmark results go, and the manifest that says what each one is.

A run's results go into one folder per day and machine, benchmarks/results/<YYYY-MM-DD>-<machine>/,
the machine named from its inventory (`machine_slug`: `h200-pcie5-xeon-amx-16c` for one H200 on
PCIe Gen5 and a 16-core AMX Xeon, `xeon-amx-2c` for a 2-core AMX Xeon without a GPU). What is
computed from shipped profiles and committed results, the same on any machine, goes into
<YYYY-MM-DD>-computed/. benchmarks/results/manifest.json lists every file: what it holds, the
command that produced it, the machine, the date, the commit (of the code that produced it; for the
files that predate the manifest, the commit that last changed them), and its former path where it
moved. tests/test_results_layout.py holds the folders and the manifest to this.

    python benchmarks/results_layout.py                      # this machine's folder for today
    python benchmarks/results_layout.py --check              # exit 1 and the problems where the manifest is off
    python benchmarks/results_layout.py --add DIR/FILE ... --command "python benchmarks/bench_x.py ..." \\
                                --what "what it holds" [--machine "the machine in words"] [--commit SHA]

Benchmarks import it as `from results_layout import results_dir` (they run as `python benchmarks/NAME.py`,
so this folder is on sys.path).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
MANIFEST = RESULTS / "manifest.json"
COMPUTED = "computed"  # the machine part of a folder of results that depend on no machine
FOLDER_RE = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})-(?P<machine>[a-z0-9]+(?:-[a-z0-9]+)*)$")
TOP_LEVEL = ("README.md", "manifest.json")  # the only files outside a dated folder
FIELDS = ("file", "what", "produced_by", "machine", "date", "commit")


def _gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA GeForce RTX 4090' -> 'rtx4090'."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name) if w and w.lower() not in ("nvidia", "geforce", "tesla")]
    return "".join(words).lower() or "gpu"


def _cpu_slug(model: str, vendor: str = "") -> str:
    low = model.lower()
    for family in ("xeon", "epyc", "threadripper", "ryzen", "core"):
        if family in low:
            return family
    return re.sub(r"[^a-z0-9]+", "", (vendor or model).lower())[:12] or "cpu"


def machine_slug(inv) -> str:
    """A folder name for the machine of an Inventory (kttune.hw.profile): GPUs (name, count, PCIe
    generation), CPU family, ISA class (kttune.hw.derive.isa_class) and physical cores, e.g.
    'h200-pcie5-xeon-amx-16c', 'h200x2-pcie5-xeon-amx-32c', 'epyc-avx512-2c'."""
    from kttune.hw.derive import isa_class

    cpu = inv.cpu
    parts = []
    if inv.gpus:
        g = inv.gpus[0]
        count = f"x{len(inv.gpus)}" if len(inv.gpus) > 1 else ""
        gen = g.pcie_gen_max or g.pcie_gen
        parts += [_gpu_slug(g.name) + count] + ([f"pcie{gen}"] if gen else [])
    parts += [_cpu_slug(cpu.model, cpu.vendor), isa_class(cpu.isa), f"{cpu.physical_cores}c"]
    return "-".join(parts)


def this_machine() -> str:
    """machine_slug of the machine this runs on."""
    from kttune.probes.inventory import collect_inventory

    return machine_slug(collect_inventory())


def results_dir(machine: str | None = None, day: date | None = None, root: Path = RESULTS, make: bool = True) -> Path:
    """benchmarks/results/<day>-<machine>/ (today, this machine by default), made if missing.
    Pass machine=COMPUTED for results that depend on no machine."""
    d = root / f"{(day or date.today()).isoformat()}-{machine or this_machine()}"
    if make:
        d.mkdir(parents=True, exist_ok=True)
    return d


# ---- the manifest ----------------------------------------------------------------------------------


def write_result(out: Path | None, doc: dict, md: str) -> None:
    """A benchmark's result: `out` with .json (the document) and .md (its table), when given; the table
    printed either way."""
    if out is not None:
        out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
        out.with_suffix(".md").write_text(md)
    print(md)


def load_manifest(path: Path | None = None) -> dict:
    path = path or MANIFEST
    return json.loads(path.read_text()) if path.exists() else {"schema": "kttune.results-manifest/1", "files": []}


def save_manifest(doc: dict, path: Path | None = None) -> None:
    path = path or MANIFEST
    doc["files"] = sorted(doc["files"], key=lambda e: e["file"])
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def problems(root: Path = RESULTS, manifest: Path = MANIFEST) -> list[str]:
    """What is off between the results folders and the manifest (empty when nothing is)."""
    out = []
    doc = load_manifest(manifest)
    listed = [e.get("file", "") for e in doc.get("files", [])]
    out += [f"{f}: listed twice" for f in sorted({f for f in listed if listed.count(f) > 1})]
    on_disk = set()
    for p in sorted(root.iterdir()):
        if p.is_file():
            if p.name not in TOP_LEVEL:
                out.append(f"{p.name}: outside a dated folder (benchmarks/results/<YYYY-MM-DD>-<machine>/)")
            continue
        m = FOLDER_RE.match(p.name)
        if not m:
            out.append(f"{p.name}/: not named <YYYY-MM-DD>-<machine>")
        on_disk |= {f.relative_to(root).as_posix() for f in p.rglob("*") if f.is_file()}
    out += [
        f"{f}: not in manifest.json (python benchmarks/results_layout.py --add benchmarks/results/{f} ...)"
        for f in sorted(on_disk - set(listed))
    ]
    out += [f"{f}: in manifest.json but missing" for f in sorted(set(listed) - on_disk)]
    for e in doc.get("files", []):
        missing = [k for k in FIELDS if not e.get(k)]
        if missing:
            out.append(f"{e.get('file')}: no {', '.join(missing)} in manifest.json")
        m = FOLDER_RE.match(e.get("file", "").split("/", 1)[0])
        if m and e.get("date") != m.group("date"):
            out.append(f"{e['file']}: dated {e.get('date')} in a folder of {m.group('date')}")
    return out


def _head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def add(
    files: list[Path], command: str, what: str, machine: str | None = None, commit: str | None = None
) -> list[dict]:
    """Entries for files already in a dated folder (replacing earlier entries of the same file; a file
    named twice, as a glob and by name, gets one)."""
    doc = load_manifest()
    new = []
    for f in dict.fromkeys(p.resolve() for p in files):
        rel = f.relative_to(RESULTS).as_posix()
        m = FOLDER_RE.match(rel.split("/", 1)[0])
        if not m or "/" not in rel:
            raise SystemExit(f"{f}: not in a dated folder of benchmarks/results/ (see results_dir)")
        new.append(
            {
                "file": rel,
                "what": what,
                "produced_by": command,
                "machine": machine or m.group("machine"),
                "date": m.group("date"),
                "commit": commit or _head(),
            }
        )
    keep = {e["file"] for e in new}
    doc["files"] = [e for e in doc["files"] if e["file"] not in keep] + new
    save_manifest(doc)
    return new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="check the folders against manifest.json")
    ap.add_argument("--add", nargs="+", type=Path, metavar="FILE", help="list these result files in manifest.json")
    ap.add_argument("--command", help="the command that produced them (with --add)")
    ap.add_argument("--what", help="what they hold (with --add)")
    ap.add_argument("--machine", help="the machine in words (with --add; default: the folder's name)")
    ap.add_argument("--commit", help="the commit of the code that produced them (with --add; default: HEAD)")
    a = ap.parse_args(argv)
    if a.add:
        if not (a.command and a.what):
            ap.error("--add needs --command and --what")
        for e in add(a.add, a.command, a.what, a.machine, a.commit):
            print(f"listed {e['file']}")
        return 0
    if a.check:
        found = problems()
        print("\n".join(found) if found else "benchmarks/results/ and manifest.json agree")
        return 1 if found else 0
    print(results_dir(make=False).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
