"""What this machine is: CPU, NUMA, ISA, RAM, GPUs (NVML) and the software that decides timings.

Fast (well under 2 s) and side-effect free: reads `/proc`, `/sys`, psutil and NVML, and looks up
package versions with `importlib.metadata`. It imports neither torch nor sglang; kt-kernel is
imported only with `import_kt=True` (the CPU probe does, since it loads kt-kernel anyway). Without
it, the kt-kernel CPU variant is the one kt-kernel's own detector (`kt_kernel/_cpu_detect.py`,
read as a file) would pick. No GPU, no NVML or an NVML error is a normal case, recorded in
`SoftwareInfo.nvml` and `Inventory.notes`.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import re
import socket
from pathlib import Path

from kttune.hw.cpu_generation import cpu_generation
from kttune.hw.profile import CpuInfo, GpuInfo, Inventory, NumaNode, SoftwareInfo
from kttune.units import GIB

# /proc/cpuinfo flag -> the name the profile uses (kttune.hw.profile.CpuInfo.isa).
_ISA_FLAGS = {
    "amx_bf16": "amx_bf16",
    "amx_int8": "amx_int8",
    "amx_tile": "amx_tile",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512_bf16": "avx512_bf16",
    "avx512_vnni": "avx512_vnni",
    "avx512vbmi": "avx512_vbmi",
    "avx512_vbmi": "avx512_vbmi",
    "avx512_fp16": "avx512_fp16",
    "avx_vnni": "avx_vnni",
    "avx2": "avx2",
    "fma": "fma",
}

SYS_NODE = Path("sys/devices/system/node")  # under the root the readers are given ("/" for this machine)
SYS_CPU = Path("sys/devices/system/cpu")


# ---- CPU ---------------------------------------------------------------------------------------
# The readers take the root of a /proc and /sys tree ("/" for this machine): tests hand them real
# trees of other hosts (tests/data/hosts/), SMT and multi-socket ones among them.


def _parse_cpulist(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            cpus.extend(range(int(a), int(b) + 1))
        else:
            cpus.append(int(part))
    return tuple(cpus)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_cpuinfo(path: str | os.PathLike = "/proc/cpuinfo") -> list[dict[str, str]]:
    text = _read(Path(path))
    if text is None:
        return []
    blocks = []
    for block in text.strip().split("\n\n"):
        d: dict[str, str] = {}
        for line in block.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                d[k.strip()] = v.strip()
        if d:
            blocks.append(d)
    return blocks


def _int(text: str | None) -> int | None:
    """cpuinfo's decimal field ('207'), or None where absent or not a number (some architectures)."""
    return int(text) if text and text.strip().isdigit() else None


def _meminfo_kib(text: str | None, key: str) -> int | None:
    """A `key:  N kB` line of /proc/meminfo or a node's meminfo ("Node 0 MemTotal: N kB"), in bytes."""
    m = re.search(rf"{key}:\s+(\d+)\s*kB", text or "")
    return int(m.group(1)) * 1024 if m else None


def cpu_topology(root: str | os.PathLike = "/") -> dict[int, tuple[int, int]]:
    """Online logical CPU -> (physical package, core id), from /sys/devices/system/cpu/cpu*/topology
    (empty when the tree has none)."""
    base = Path(root) / SYS_CPU
    online = _read(base / "online")
    ids = (
        _parse_cpulist(online)
        if online
        else tuple(sorted(int(d.name[3:]) for d in base.glob("cpu[0-9]*") if d.name[3:].isdigit()))
    )
    out = {}
    for i in ids:
        t = base / f"cpu{i}" / "topology"
        pkg, core = _read(t / "physical_package_id"), _read(t / "core_id")
        if pkg is not None and core is not None:
            out[i] = (int(pkg), int(core))
    return out


def _cache_bytes(text: str) -> int | None:
    """sysfs's cache `size` ('307200K', '32M', '1G') in bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text or "")
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def last_level_cache_bytes(root: str | os.PathLike = "/") -> int | None:
    """The size of the largest-level data or unified cache CPU 0 reports under `root`'s sysfs
    (`cpu0/cache/index*/{level,type,size}`: the L3 a socket's cores share), or None where sysfs has no
    cache entries (some containers and VMs)."""
    best: tuple[int, int] | None = None
    for d in sorted((Path(root) / SYS_CPU / "cpu0" / "cache").glob("index*")):
        level, kind, size = (_read(d / f) for f in ("level", "type", "size"))
        if not level or not size or (kind or "").strip() == "Instruction":
            continue
        nbytes = _cache_bytes(size)
        if nbytes and level.strip().isdigit() and (best is None or int(level) > best[0]):
            best = (int(level), nbytes)
    return None if best is None else best[1]


def _numa_nodes(root: str | os.PathLike, ram_total: int, logical: int) -> tuple[NumaNode, ...]:
    nodes = []
    base = Path(root) / SYS_NODE
    if base.is_dir():
        for d in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            text = _read(d / "cpulist")
            nodes.append(
                NumaNode(
                    id=int(d.name[4:]),
                    cpus=_parse_cpulist(text) if text else (),
                    mem_total_bytes=_meminfo_kib(_read(d / "meminfo"), "MemTotal") or 0,
                )
            )
    if not nodes:
        nodes.append(NumaNode(id=0, cpus=tuple(range(logical)), mem_total_bytes=ram_total))
    return tuple(nodes)


def collect_cpu(root: str | os.PathLike = "/") -> CpuInfo:
    """The CPU of the machine whose /proc and /sys are under `root`: model, ISA flags, logical CPUs
    and physical cores (SMT siblings share a core: from the topology files, else cpuinfo's physical
    and core ids), sockets, NUMA nodes with their CPUs and memory, RAM."""
    root = Path(root)
    blocks = _read_cpuinfo(root / "proc" / "cpuinfo")
    first = blocks[0] if blocks else {}
    flags = set(first.get("flags", "").split())
    isa = tuple(sorted({name for flag, name in _ISA_FLAGS.items() if flag in flags}))
    topo = cpu_topology(root)
    this_machine = root == Path("/")
    if topo:
        logical, physical, sockets = len(topo), len(set(topo.values())), len({p for p, _ in topo.values()})
    else:
        pairs = {(b.get("physical id", "0"), b.get("core id", b.get("processor", "0"))) for b in blocks}
        logical = len(blocks) or os.cpu_count() or 1
        physical, sockets = len(pairs) or logical, len({b.get("physical id", "0") for b in blocks}) or 1
        if this_machine:
            import psutil

            logical = psutil.cpu_count(logical=True) or logical
            physical = psutil.cpu_count(logical=False) or physical
    meminfo = _read(root / "proc" / "meminfo")
    total, avail = _meminfo_kib(meminfo, "MemTotal"), _meminfo_kib(meminfo, "MemAvailable")
    if (total is None or avail is None) and this_machine:
        import psutil

        vm = psutil.virtual_memory()
        total, avail = int(vm.total), int(vm.available)
    total, avail = total or 0, avail or 0
    return CpuInfo(
        model=first.get("model name", platform.processor() or "unknown CPU"),
        vendor=first.get("vendor_id", ""),
        physical_cores=int(physical),
        logical_cpus=int(logical),
        sockets=int(sockets),
        numa_nodes=_numa_nodes(root, total, logical),
        isa=isa,
        ram_total_bytes=int(total),
        ram_available_bytes=int(avail),
        family=_int(first.get("cpu family")),
        model_number=_int(first.get("model")),
        stepping=_int(first.get("stepping")),
        last_level_cache_bytes=last_level_cache_bytes(root),
    )


def usable_cores(cpu: CpuInfo) -> int:
    """Cores a CPU worker pool can fill: physical cores, capped by this process's CPU affinity
    (a container or `taskset` may allow fewer)."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = cpu.logical_cpus
    return max(1, min(cpu.physical_cores or allowed, allowed))


def usable_logical(cpu: CpuInfo) -> int:
    """Logical CPUs (SMT threads included) this process may run on: the machine's, capped by its
    CPU affinity."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = cpu.logical_cpus
    return max(1, min(cpu.logical_cpus or allowed, allowed))


def smt_logical(cpu: CpuInfo, cores: int) -> int:
    """The logical CPUs that go with `cores` physical cores (x the SMT width), capped by the CPU's
    logical count, and, when `cpu` is this machine, by this process's affinity."""
    width = max(1, round((cpu.logical_cpus or cores) / max(1, cpu.physical_cores or cores)))
    n = min(cpu.logical_cpus or cores, cores * width)
    if cpu.logical_cpus == (os.cpu_count() or 0):
        n = min(n, usable_logical(cpu))
    return max(cores, n)


def node_physical_cores(cpu: CpuInfo, node_id: int) -> int:
    """Physical cores of one NUMA node: its logical CPUs over the machine's SMT width."""
    node = next((n for n in cpu.numa_nodes if n.id == node_id), None)
    if node is None or not node.cpus:
        return 0
    smt = max(1, round((cpu.logical_cpus or len(node.cpus)) / max(1, cpu.physical_cores or len(node.cpus))))
    return max(1, len(node.cpus) // smt)


def numa_nodes_with_cpus(cpu: CpuInfo) -> tuple[int, ...]:
    """Ids of NUMA nodes that have CPUs: one kt-kernel thread pool each (`--kt-threadpool-count`)."""
    ids = tuple(n.id for n in cpu.numa_nodes if n.cpus)
    return ids or (0,)


# ---- GPUs (NVML) -------------------------------------------------------------------------------


def _str(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _nvml_call(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def _pci_numa_node(bus_id: str) -> int | None:
    """NUMA node of a PCI device from /sys (NVML bus ids carry 8 hex domain digits, /sys has 4)."""
    bus = bus_id.lower()
    candidates = [bus]
    m = re.match(r"^([0-9a-f]+):(.*)$", bus)
    if m:
        candidates.append(f"{int(m.group(1), 16):04x}:{m.group(2)}")
    for b in candidates:
        p = Path("/sys/bus/pci/devices") / b / "numa_node"
        try:
            v = int(p.read_text().strip())
            return v if v >= 0 else None
        except (OSError, ValueError):
            continue
    return None


def collect_gpus() -> tuple[tuple[GpuInfo, ...], dict[str, str | None], list[str]]:
    """(GPUs, {"nvml", "nvidia_driver", "cuda_driver"}, notes). Never raises."""
    info: dict[str, str | None] = {"nvml": None, "nvidia_driver": None, "cuda_driver": None}
    notes: list[str] = []
    try:
        import pynvml
    except ImportError:
        info["nvml"] = "unavailable: pynvml (nvidia-ml-py) is not installed"
        notes.append("no GPU inventory: " + info["nvml"])
        return (), info, notes
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        info["nvml"] = f"unavailable: {type(e).__name__}: {e}"
        notes.append("no GPU found (NVML " + info["nvml"] + ")")
        return (), info, notes
    gpus: list[GpuInfo] = []
    try:
        info["nvml"] = _str(_nvml_call(pynvml.nvmlSystemGetNVMLVersion) or "unknown")
        drv = _nvml_call(pynvml.nvmlSystemGetDriverVersion)
        info["nvidia_driver"] = _str(drv) if drv is not None else None
        cuda = _nvml_call(getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", pynvml.nvmlSystemGetCudaDriverVersion))
        if cuda:
            info["cuda_driver"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        count = pynvml.nvmlDeviceGetCount()
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            pci = _nvml_call(pynvml.nvmlDeviceGetPciInfo, h)
            bus_id = _str(pci.busId) if pci is not None else ""
            numa = None
            if hasattr(pynvml, "nvmlDeviceGetNumaNodeId"):
                numa = _nvml_call(pynvml.nvmlDeviceGetNumaNodeId, h)
                if numa is not None and numa < 0:
                    numa = None
            if numa is None and bus_id:
                numa = _pci_numa_node(bus_id)
            cc = _nvml_call(pynvml.nvmlDeviceGetCudaComputeCapability, h)
            uuid = _nvml_call(pynvml.nvmlDeviceGetUUID, h)
            gpus.append(
                GpuInfo(
                    index=i,
                    name=_str(pynvml.nvmlDeviceGetName(h)),
                    vram_total_bytes=int(mem.total),
                    vram_free_bytes=int(mem.free),
                    pcie_gen=_nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    pcie_width=_nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                    pcie_gen_max=_nvml_call(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    pcie_width_max=_nvml_call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                    numa_node=numa,
                    compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
                    uuid=_str(uuid) if uuid is not None else None,
                )
            )
        if not gpus:
            notes.append("NVML found no GPU")
    except Exception as e:
        notes.append(f"NVML error while listing GPUs: {type(e).__name__}: {e}")
    finally:
        _nvml_call(pynvml.nvmlShutdown)
    return tuple(gpus), info, notes


# ---- software ------------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _package_dir(name: str) -> Path | None:
    """Directory of an installed top-level package, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _torch_cuda_version() -> str | None:
    """`torch.version.cuda`, read from torch/version.py without importing torch."""
    d = _package_dir("torch")
    if d is None:
        return None
    try:
        m = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]", (d / "version.py").read_text(), re.M)
    except OSError:
        return None
    return m.group(1) if m else None


def kt_variant_detected() -> str | None:
    """The CPU variant kt-kernel would load here, from its own detector file (no import of
    kt-kernel, which would pull in torch); honours `KT_KERNEL_CPU_VARIANT`."""
    d = _package_dir("kt_kernel")
    if d is None or not (d / "_cpu_detect.py").is_file():
        return None
    try:
        spec = importlib.util.spec_from_file_location("_kttune_kt_cpu_detect", d / "_cpu_detect.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        return str(mod.detect_cpu_features())
    except Exception:
        return None


def kt_variant_loaded() -> str | None:
    """The CPU variant kt-kernel actually loaded (imports kt-kernel and so torch)."""
    try:
        import kt_kernel
    except Exception:
        return None
    return str(getattr(kt_kernel, "__cpu_variant__", None) or "") or None


def sglang_info() -> dict[str, object]:
    """sglang's version, whether it is the KT fork (`sglang-kt` distribution), and whether its
    server_args knows `--kt-gpu-prefill-token-threshold` (layerwise prefill; fork only)."""
    fork = _version("sglang-kt")
    upstream = _version("sglang")
    version = fork or upstream
    has_threshold = None
    d = _package_dir("sglang")
    if d is not None:
        sa = d / "srt" / "server_args.py"
        try:
            has_threshold = "kt-gpu-prefill-token-threshold" in sa.read_text()
        except OSError:
            has_threshold = None
    return {
        "sglang": version,
        "sglang_is_kt_fork": (fork is not None) if version else None,
        "sglang_has_layerwise_threshold": has_threshold,
    }


def collect_software(import_kt: bool = False, nvml: dict[str, str | None] | None = None) -> SoftwareInfo:
    kt_version = _version("kt-kernel")
    variant = None
    if kt_version is not None:
        variant = kt_variant_loaded() if import_kt else kt_variant_detected()
    nvml = nvml or {}
    return SoftwareInfo(
        python=platform.python_version(),
        torch=_version("torch"),
        torch_cuda=_torch_cuda_version(),
        kt_kernel=kt_version,
        kt_cpu_variant=variant,
        sgl_kernel=_version("sgl-kernel"),
        nvidia_driver=nvml.get("nvidia_driver"),
        cuda_driver=nvml.get("cuda_driver"),
        nvml=nvml.get("nvml"),
        **sglang_info(),  # type: ignore[arg-type]
    )


# ---- all together ----------------------------------------------------------------------------------


def collect_inventory(import_kt: bool = False) -> Inventory:
    """The machine's inventory. `import_kt=True` imports kt-kernel to report the variant it really
    loads (slow: pulls in torch); otherwise the variant its detector would pick."""
    cpu = collect_cpu()
    gpus, nvml, notes = collect_gpus()
    software = collect_software(import_kt=import_kt, nvml=nvml)
    if software.kt_kernel is None:
        notes.append(
            "kt-kernel is not installed: CPU expert timings fall back to torch (pip install --no-deps kt-kernel==0.7.2)"
        )
    if software.sglang is None:
        notes.append("sglang is not installed")
    elif not software.sglang_has_layerwise_threshold:
        notes.append("this sglang has no --kt-gpu-prefill-token-threshold (layerwise prefill needs sglang-kt)")
    return Inventory(cpu=cpu, gpus=gpus, software=software, hostname=socket.gethostname(), notes=tuple(notes))


def _isa_summary(cpu: CpuInfo) -> str:
    if cpu.has("amx_int8") or cpu.has("amx_bf16"):
        return "AMX"
    if cpu.has("avx512_bf16"):
        return "AVX-512 BF16"
    if cpu.has("avx512f"):
        return "AVX-512"
    if cpu.has("avx2"):
        return "AVX2"
    return "no AVX2"


def machine_name(inv: Inventory) -> str:
    """A human name for the machine, e.g. 'AMD EPYC, 2 cores (AVX2), no GPU' or
    'Intel Xeon ..., 16 cores (AMX) + 1x NVIDIA H200 (PCIe Gen5 x16)'."""
    cpu = inv.cpu
    numa = f", {len(cpu.numa_nodes)} NUMA nodes" if len(cpu.numa_nodes) > 1 else ""
    gen = cpu_generation(cpu.vendor, cpu.family, cpu.model_number)
    name = f"{cpu.model} ({gen})" if gen and gen.split()[0].lower() not in cpu.model.lower() else cpu.model
    head = f"{name}, {cpu.physical_cores} cores ({_isa_summary(cpu)}){numa}, {cpu.ram_total_bytes / GIB:.0f} GiB RAM"
    if not inv.gpus:
        return head + ", no GPU"
    names: dict[str, int] = {}
    for g in inv.gpus:
        link = f" (PCIe Gen{g.pcie_gen_max} x{g.pcie_width_max})" if g.pcie_gen_max else ""
        key = g.name + link
        names[key] = names.get(key, 0) + 1
    return head + " + " + ", ".join(f"{n}x {k}" for k, n in names.items())


def host_line() -> str:
    """The host a benchmark ran on, in one line for its results: node name, CPU model, logical CPUs
    and Python version."""
    return f"{platform.node()}: {collect_cpu().model}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
