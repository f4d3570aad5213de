"""benchmarks/results/ is one folder per day and machine, and manifest.json lists every file in it
(benchmarks/results_layout.py). The machine names are checked against the names people gave the shipped
profiles' machines."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from kttune.hw.profile import GpuInfo
from kttune.hw.registry import load_shipped
from tests.helpers import DATA, script

ROOT = Path(__file__).resolve().parents[1]
L = script("benchmarks/results_layout.py")


def test_every_result_is_in_a_dated_machine_folder_and_in_the_manifest():
    assert L.problems() == []


def test_the_manifest_check_finds_what_is_off(tmp_path):
    (tmp_path / "loose.json").write_text("{}")
    (tmp_path / "h200").mkdir()
    day = tmp_path / "2026-12-01-h200-pcie5-xeon-amx-16c"
    day.mkdir()
    (day / "paths.json").write_text("{}")
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "files": [
                    {
                        "file": "2026-12-01-h200-pcie5-xeon-amx-16c/gone.json",
                        "what": "x",
                        "produced_by": "x",
                        "machine": "x",
                        "date": "2026-11-30",
                        "commit": "x",
                    }
                ]
            }
        )
    )
    found = "\n".join(L.problems(tmp_path, tmp_path / "manifest.json"))
    for part in (
        "loose.json: outside a dated folder",
        "h200/: not named",
        "paths.json: not in manifest.json",
        "gone.json: in manifest.json but missing",
        "dated 2026-11-30 in a folder of 2026-12-01",
    ):
        assert part in found


@pytest.mark.parametrize(
    "name", ["h200-pcie5-xeon-amx-16c", "h200x2-pcie5-xeon-amx-32c", "datasheet-rtx4090-pcie4-xeon-amx-64c"]
)
def test_machine_slug_names_a_shipped_profile_as_its_name_does(name):
    assert L.machine_slug(load_shipped(name).inventory) == name.removeprefix("datasheet-")


def test_machine_slug_of_real_host_trees():
    """/proc and /sys of two real hosts (tests/data/hosts/): an AMD EPYC 9124 (16 cores, AVX-512)
    and a two-socket Xeon Silver 4509Y (AMX, 8 cores a socket), here with two RTX 4090s."""
    from kttune.hw.profile import Inventory
    from kttune.probes.inventory import collect_cpu

    epyc = collect_cpu(DATA / "hosts" / "epyc-1s-smt")
    xeon = collect_cpu(DATA / "hosts" / "xeon-2s-smt")
    assert L.machine_slug(Inventory(cpu=epyc)) == "epyc-avx512-16c"
    rtx = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=24 << 30, pcie_gen_max=4)
    assert L.machine_slug(Inventory(cpu=xeon, gpus=(rtx, rtx))) == "rtx4090x2-pcie4-xeon-amx-16c"


def test_results_dir_is_dated_and_named_for_the_machine(tmp_path):
    d = L.results_dir("computed", date(2026, 12, 1), root=tmp_path)
    assert d == tmp_path / "2026-12-01-computed" and d.is_dir()
    assert L.FOLDER_RE.match(L.results_dir(day=date(2026, 12, 2), root=tmp_path, make=False).name)


def test_a_file_named_twice_in_one_add_is_listed_once(tmp_path, monkeypatch):
    """`--add` with a glob that also matches a file named on its own lists that file once."""
    day = tmp_path / "2026-12-06-h100-pcie5-xeon-amx-16c"
    day.mkdir()
    (day / "machine.txt").write_text("x")
    (day / "run.json").write_text("{}")
    monkeypatch.setattr(L, "RESULTS", tmp_path)
    monkeypatch.setattr(L, "MANIFEST", tmp_path / "manifest.json")
    L.add([day / "machine.txt", day / "run.json", day / "machine.txt"], "cmd", "what", commit="abc")
    listed = [e["file"] for e in json.loads((tmp_path / "manifest.json").read_text())["files"]]
    assert sorted(listed) == [f"{day.name}/machine.txt", f"{day.name}/run.json"]
    assert L.problems(tmp_path, tmp_path / "manifest.json") == []
