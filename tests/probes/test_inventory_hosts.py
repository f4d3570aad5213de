"""The inventory readers on /proc and /sys trees of hosts users have (tests/data/hosts/: the
kernel's own file formats, cpuinfo, cpu*/topology/*, node*/cpulist and meminfo, for a two-socket
SMT Xeon with AMX and a one-socket SMT EPYC with AVX-512), and what the probe plans on them: thread
counts up to and above the physical core count on SMT hosts, a pool on one NUMA node beside the
pool over every node on multi-socket hosts, and the launch flags chosen from what was measured."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kttune.probes.common import probe_thread_counts, smt_thread_counts
from kttune.probes.inventory import (
    collect_cpu,
    cpu_topology,
    node_physical_cores,
    numa_nodes_with_cpus,
    smt_logical,
)

HOSTS = Path(__file__).resolve().parents[1] / "data" / "hosts"
GIB = 2**30


def test_a_two_socket_smt_xeon():
    cpu = collect_cpu(HOSTS / "xeon-2s-smt")
    assert (cpu.physical_cores, cpu.logical_cpus, cpu.sockets) == (16, 32, 2)
    assert [n.cpus for n in cpu.numa_nodes] == [
        tuple(range(0, 8)) + tuple(range(16, 24)),
        tuple(range(8, 16)) + tuple(range(24, 32)),
    ]
    assert all(abs(n.mem_total_bytes / GIB - 251.7) < 0.1 for n in cpu.numa_nodes)
    assert cpu.ram_total_bytes == 527961048 * 1024 and 0 < cpu.ram_available_bytes < cpu.ram_total_bytes
    assert cpu.has("amx_int8") and cpu.has("avx512_bf16") and cpu.model == "INTEL(R) XEON(R) SILVER 4509Y"
    topo = cpu_topology(HOSTS / "xeon-2s-smt")
    assert topo[0] == topo[16] == (0, 0) and topo[8] == topo[24] == (1, 0)  # SMT siblings share a core
    assert numa_nodes_with_cpus(cpu) == (0, 1) and node_physical_cores(cpu, 1) == 8


def test_a_one_socket_smt_epyc():
    cpu = collect_cpu(HOSTS / "epyc-1s-smt")
    assert (cpu.physical_cores, cpu.logical_cpus, cpu.sockets, len(cpu.numa_nodes)) == (16, 32, 1, 1)
    assert cpu.has("avx512_bf16") and not cpu.has("amx_int8")
    assert cpu.numa_nodes[0].cpus == tuple(range(32))


def test_this_machines_tree_reads_as_psutil_counts_it():
    import psutil

    cpu = collect_cpu("/")
    assert cpu.logical_cpus == psutil.cpu_count(logical=True)
    assert cpu.physical_cores == (psutil.cpu_count(logical=False) or cpu.logical_cpus)


@pytest.mark.parametrize("quick", [True, False])
def test_smt_hosts_measure_counts_above_the_core_count(quick):
    cpu = collect_cpu(HOSTS / "epyc-1s-smt")
    logical = smt_logical(cpu, 16)
    assert logical == 32
    counts = probe_thread_counts(16, quick, (), logical)
    assert int(0.8 * 32) in counts  # kt run's default, 25, inside the cliff users report
    assert max(c for c in counts if c < 16) == (13 if quick else 15)
    if not quick:
        assert {16, 25, 31} <= set(counts)
    assert smt_thread_counts(16, 16, quick) == []  # no SMT: nothing above the cores


def test_a_multi_socket_host_is_measured_per_numa_node_and_over_all():
    from kttune.probes import cpu_moe as cm

    cpu = collect_cpu(HOSTS / "xeon-2s-smt")
    opts = cm.CpuMoeOptions(shapes=cm.FULL_SHAPES, tokens=(1, 64, 1024), methods=("BF16",))
    try:
        plan = cm.plan_cpu_moe(
            replace(opts), replace(cpu, isa=collect_cpu("/").isa), 16, list(numa_nodes_with_cpus(cpu))
        )
    except Exception as e:  # kt-kernel missing here: the plan needs its method list
        pytest.skip(f"kt-kernel not importable ({e})")
    every = sorted({t.threads for t in plan.tasks if not t.numa_nodes and t.shape == cm.FULL_SHAPES[0]})
    one = sorted({t.threads for t in plan.tasks if t.numa_nodes == (0,)})
    assert every == [11, 13, 15, 16, 25, 31]  # both sockets, one pool per node
    assert {t.threadpools for t in plan.tasks if not t.numa_nodes} == {2}
    assert one == [3, 5, 7, 8, 12, 15] and {t.threadpools for t in plan.tasks if t.numa_nodes} == {1}
    assert any("NUMA" in n for n in plan.notes)


def _two_node_profile(one_node_factor: float):
    """The shipped 16-core profile's CPU MoE curves as a two-node host would record them: over both
    nodes (two pools) as measured, and on node 0 alone (one pool) `one_node_factor` x as long."""
    from kttune.hw.registry import load_shipped

    src = load_shipped("h200-pcie5-xeon-amx-16c")
    curves = []
    for c in src.curves:
        if c.kind != "cpu_moe":
            curves.append(c)
            continue
        curves.append(replace(c, params={**c.params, "threadpools": 2}))
        pts = tuple(replace(p, t_ms=p.t_ms * one_node_factor) for p in c.points)
        curves.append(replace(c, points=pts, params={**c.params, "threadpools": 1, "numa_nodes": [0]}))
    return replace(src, curves=tuple(curves))


@pytest.mark.parametrize("factor,want", [(0.8, (1, (0,))), (1.25, (2, ()))])
def test_the_launch_flags_follow_what_was_measured(factor, want):
    from kttune.config import LaunchConfig
    from kttune.cost.components import Components
    from kttune.search.launch import LaunchPaths, launch_argv
    from kttune.emit.launch import launch_command
    from kttune.memory.vram import vram_breakdown
    from kttune.spec.loader import load_model

    spec = load_model("qwen3-30b-a3b")
    c = Components(_two_node_profile(factor), spec, "BF16")
    assert c.threadpool_choice(13) == want
    pools, numa = want
    cfg = LaunchConfig("BF16", 1, 0, 8192, 0, 65536, 13, threadpool_count=pools, numa_nodes=numa)
    argv = launch_argv(spec, cfg, vram_breakdown(spec, cfg), 80 * GIB, LaunchPaths("/m", "/m", ()))
    i = argv.index("--kt-threadpool-count")
    assert argv[i + 1] == str(pools)
    assert ("--kt-numa-nodes" in argv) == bool(numa)
    if numa:  # kt-kernel wants one id per pool
        j = argv.index("--kt-numa-nodes")
        assert argv[j + 1 : j + 1 + pools] == [str(n) for n in numa]
        assert any(line.strip() == "--kt-numa-nodes 0 \\" for line in launch_command(argv).splitlines())


def test_the_last_level_cache_of_the_amx_box():
    """The 16-core H200 box's sysfs cache entries (cpu0: L1d 48K, L1i 32K, L2 2048K, a 300 MB L3 over
    CPUs 0-15): the L3, not the instruction cache or a lower level; None where sysfs has no entries."""
    from kttune.probes.inventory import last_level_cache_bytes

    assert last_level_cache_bytes(HOSTS / "xeon-amx-16c-vm") == 307200 * 1024
    assert last_level_cache_bytes(HOSTS / "epyc-1s-smt") is None  # that tree holds no cache entries
    mine = last_level_cache_bytes()
    assert mine is None or mine >= 1 << 20


def test_the_cpuid_numbers_name_the_generation_under_any_model_name():
    """cpuinfo's family / model / stepping (the two real trees), and the machine's name carries the
    generation they name: on cloud VMs whose model name is "Intel(R) Xeon(R) Processor" they are what
    tells a Sapphire Rapids instance from an Emerald Rapids one (docs/probe.md#one-name-two-cpus)."""
    from kttune.hw.profile import Inventory, SoftwareInfo
    from kttune.probes.inventory import machine_name

    xeon, epyc = collect_cpu(HOSTS / "xeon-2s-smt"), collect_cpu(HOSTS / "epyc-1s-smt")
    assert (xeon.family, xeon.model_number, xeon.stepping) == (6, 207, 2)  # Silver 4509Y: Emerald Rapids
    assert (epyc.family, epyc.model_number, epyc.stepping) == (25, 17, 1)  # EPYC 9124: Zen 4
    name = machine_name(Inventory(cpu=replace(xeon, model="Intel(R) Xeon(R) Processor"), software=SoftwareInfo()))
    assert name.startswith("Intel(R) Xeon(R) Processor (Emerald Rapids), 16 cores")
    assert machine_name(Inventory(cpu=epyc, software=SoftwareInfo())).startswith(
        "AMD EPYC 9124 16-Core Processor (Zen 4)"
    )
    masked = replace(xeon, family=None, model_number=None)  # a profile written before they were read
    assert machine_name(Inventory(cpu=masked, software=SoftwareInfo())).startswith("INTEL(R) XEON(R) SILVER 4509Y, ")
    # the inventory keeps the last-level cache it read (the 16-core AMX box's 300 MB L3)
    assert collect_cpu(HOSTS / "xeon-amx-16c-vm").last_level_cache_bytes == 307200 * 1024
