"""A missing optional part (matplotlib, torch, scipy, Triton, kt-kernel) is one line naming its
install, exit 2, and nothing half-written. Each case runs kttune in a fresh interpreter where the
module cannot be imported (`sys.modules[name] = None`, which is what Python does for a module that
is not there: `import` raises ModuleNotFoundError naming it); kttune's own code runs unchanged."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kttune.extras import OPTIONAL

QWEN = ["-m", "qwen3-30b-a3b", "--vram", "32G"]


def kttune_without(modules: tuple[str, ...], argv: list[str], cwd) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        f"sys.modules.update(dict.fromkeys({modules!r}))\n"
        f"sys.argv = ['kttune', *{argv!r}]\n"
        "from kttune.cli import main\n"
        "sys.exit(main())\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def assert_names_the_install(p: subprocess.CompletedProcess, module: str, *needles: str) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert OPTIONAL[module].install in lines[0]
    assert "Traceback" not in p.stderr and "kttune bug" not in lines[0]
    for n in needles:
        assert n in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["search", *QWEN, "--trials", "5", "--storage", ":memory:"],
        ["explain", *QWEN, "--gpu-experts", "4"],
        ["simulate", "-m", "qwen3-30b-a3b", "--requests", "20"],
        ["probe", "--quick", "--cpu-only"],
        ["paths", "qwen3-30b-a3b", "--small", "--device", "cpu"],
    ],
    ids=lambda a: a[0],
)
def test_report_without_matplotlib_is_refused_before_any_work(tmp_path, argv):
    report = tmp_path / "report"
    p = kttune_without(("matplotlib",), [*argv, "--report", str(report)], tmp_path)
    assert_names_the_install(p, "matplotlib", "--report", "kttune[plot]")
    assert not report.exists()  # no empty report directory
    assert p.stdout == ""  # refused before the command printed (or measured) anything
    assert not (tmp_path / "kttune-cache" / "profiles").exists()  # the probe measured nothing


def test_report_command_without_matplotlib(tmp_path):
    doc = tmp_path / "r.json"
    search = kttune_without((), ["search", *QWEN, "--trials", "5", "--storage", ":memory:", "--json"], tmp_path)
    assert search.returncode == 0, search.stderr
    doc.write_text(search.stdout)
    p = kttune_without(("matplotlib",), ["report", str(doc), "--out", str(tmp_path / "out")], tmp_path)
    assert_names_the_install(p, "matplotlib", "kttune report")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["probe", "--quick"], "kttune probe"),
        (["paths", "qwen3-30b-a3b", "--small", "--device", "cpu"], "kttune paths"),
        (
            ["search", *QWEN, "--measure", "--evaluator", "runner-cpu", "--trials", "1", "--storage", ":memory:"],
            "--evaluator runner-cpu",
        ),
    ],
    ids=["probe", "paths", "search-measure"],
)
def test_measuring_without_torch(tmp_path, argv, needle):
    p = kttune_without(("torch",), argv, tmp_path)
    assert_names_the_install(p, "torch", needle, "kttune[measure]")


def test_the_model_commands_need_no_torch(tmp_path):
    """The main job, listing and explaining run where torch cannot be imported at all."""
    for argv in (
        ["search", *QWEN, "--trials", "20", "--storage", ":memory:"],
        ["explain", *QWEN, "--gpu-experts", "4"],
        ["models"],
        ["profiles"],
        ["workloads"],
        ["profile", "show"],
    ):
        p = kttune_without(("torch",), argv, tmp_path)
        assert p.returncode == 0, (argv, p.stderr)


def test_measured_search_without_scipy(tmp_path):
    p = kttune_without(
        ("scipy",),
        ["search", *QWEN, "--measure", "--evaluator", "model", "--trials", "1", "--storage", ":memory:"],
        tmp_path,
    )
    assert_names_the_install(p, "scipy", "--measure", "kttune[measure]")


def test_host_ram_probe_without_kt_kernel(tmp_path):
    p = kttune_without(("kt_kernel",), ["probe", "--quick", "--cpu-only", "--host-ram"], tmp_path)
    assert_names_the_install(p, "kt_kernel", "--host-ram", "--no-deps kt-kernel==0.7.2")
    assert not (tmp_path / "kttune-cache" / "profiles").exists()


def test_triton_kernels_without_triton(tmp_path):
    """Every caller falls back to the torch variants (available() is False); calling a Triton kernel
    directly is the user error naming the install."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch\n"
        "from kttune.errors import UserError\n"
        "from kttune.kernels import triton_int4\n"
        "assert not triton_int4.available('cpu') and not triton_int4.available('cuda')\n"
        "try:\n"
        "    triton_int4.transpose_last2(torch.zeros(4, 8))\n"
        "except UserError as e:\n"
        "    print(e.line())\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "needs Triton" in p.stdout and OPTIONAL["triton"].install in p.stdout


def test_an_unguarded_import_of_a_missing_part_is_still_a_user_error(monkeypatch, capsys):
    """run_app: an optional module imported where no `require` guards it gives the same line, not
    'this is a kttune bug'."""
    import typer

    from kttune.cli.common import run_app

    app = typer.Typer()

    @app.command()
    def figures() -> None:
        import matplotlib  # noqa: F401

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert run_app(app, []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and OPTIONAL["matplotlib"].install in err and "bug" not in err
