"""A host-RAM refusal says whose RAM it counted (the profile's machine, this machine's probe, or
--host-ram) and how to change it."""

from __future__ import annotations

from dataclasses import replace

from kttune import app
from kttune.cli import main
from kttune.hw.registry import default_shipped_name, load_shipped
from kttune.search.evaluate import HostRamSource
from kttune.search.space import build_space
from kttune.search.study import study_key
from kttune.units import GIB

KIMI = ["search", "-m", "kimi-k2-thinking", "--vram", "32G", "--trials", "5", "--storage", ":memory:"]


def _error(capsys, argv) -> str:
    assert main(argv) == 1  # does not fit: exit 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: ")
    return lines[-1]


def test_the_shipped_profile_is_named_as_the_machine_whose_ram_it_is(capsys):
    name = default_shipped_name()
    gib = load_shipped(name).inventory.cpu.ram_total_bytes / GIB
    line = _error(capsys, KIMI)
    assert f"the profile's machine ({name}) has {gib:.0f} GiB" in line
    assert "--host-ram" in line and "--profile" in line
    assert "the machine has" not in line


def test_a_given_host_ram_is_named_as_such(capsys):
    line = _error(capsys, [*KIMI, "--host-ram", "24G"])
    assert "--host-ram gives 24 GiB" in line and "raise --host-ram" in line


def test_after_probing_a_small_machine_the_refusal_points_at_profile_and_host_ram(capsys):
    """A real (small) `kttune probe` of this machine, then a model whose experts no test machine
    holds: the refusal counts this machine's RAM and names the shipped profile to plan with."""
    assert (
        main(
            [
                "probe",
                "--quick",
                "--cpu-only",
                "--methods",
                "BF16",
                "--threads",
                "1",
                "--max-tokens",
                "4",
                "--skip-host-ram",
            ]
        )
        == 0
    )
    capsys.readouterr()
    line = _error(
        capsys,
        [
            "search",
            "-m",
            "qwen3-235b-a22b",
            "--kt-method",
            "BF16",
            "--vram",
            "32G",
            "--trials",
            "5",
            "--storage",
            ":memory:",
        ],
    )
    assert "this machine has" in line and "its `kttune probe` profile" in line
    assert f"--profile {default_shipped_name()}" in line and "--host-ram" in line


def test_where_the_ram_comes_from_does_not_change_the_study():
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, 1, None, "rag", None, None, 0.05)
    req = inp.request
    assert req.budget.host_ram_source == HostRamSource("profile", default_shipped_name())
    other = replace(req, budget=replace(req.budget, host_ram_source=HostRamSource("flag")))
    from kttune.cost.components import Components

    space = build_space(Components(req.profile, req.model, req.method, req.tp), req.workload, req.budget, req.tp)
    assert study_key(req, space, 1) == study_key(other, space, 1)
