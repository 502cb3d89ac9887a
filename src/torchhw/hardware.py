"""What this machine is: CPU, instruction sets, memory, GPUs and the torch build.

Nothing here initialises CUDA in the calling process. GPU properties come from a short
child process, so a notebook that reports its hardware can still fork or spawn workers
afterwards (the same reason accelerate asks ``nvidia-smi`` instead of torch).

    from torchhw import hardware
    survey = hardware.survey()      # a table in a notebook, survey.to_dict() for JSON

What the CPU could compute at best is in :mod:`torchhw.peak`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil
import torch

# The flags that change which kernels PyTorch can use on a CPU.
ISA_FLAGS = {
    "avx2": "AVX2",
    "fma": "FMA",
    "avx512f": "AVX-512",
    "avx512_bf16": "AVX-512 BF16",
    "avx512_fp16": "AVX-512 FP16",
    "avx512_vnni": "AVX-512 VNNI",
    "amx_tile": "AMX",
    "amx_bf16": "AMX BF16",
    "amx_fp16": "AMX FP16",
    "asimd": "NEON",
    "sve": "SVE",
}


@dataclass
class CPUInfo:
    model: str
    vendor: str
    arch: str
    logical_cores: int
    physical_cores: int | None
    clock_ghz: float | None
    clock_source: str
    family: int | None = None
    model_number: int | None = None
    isa: dict[str, bool] = field(default_factory=dict)
    torch_capability: str = ""
    caches: dict[str, int] = field(default_factory=dict)  # "L1d", "L2", "L3" -> bytes per cache
    local: bool = False  # this machine's CPU (cpu_info), not one described by hand
    # "L2" -> how many logical CPUs share one such cache (Linux only; {} when unknown)
    cache_sharing: dict[str, int] = field(default_factory=dict)


@dataclass
class GPUInfo:
    index: int
    name: str
    memory_gib: float
    compute_capability: str
    sm_count: int
    # theoretical memory bandwidth: 2 transfers per memory clock x bus width (None: not reported)
    memory_gbps: float | None = None
    clock_ghz: float | None = None  # the maximum SM clock the GPU reports


@dataclass(repr=False)
class HardwareSurvey:
    cpu: CPUInfo
    memory_gib: float
    torch_build: dict[str, Any]
    gpus: list[GPUInfo]
    gpu_note: str
    mps: bool
    clock: Any = None  # torchhw.clock.Clock: the clock the cores run at, measured where possible

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """(item, value) pairs in reading order, for a table."""
        c = self.cpu
        isa = ", ".join(ISA_FLAGS[k] for k, v in c.isa.items() if v) or "none detected"
        cores = f"{c.logical_cores} logical"
        if c.physical_cores:
            cores += f", {c.physical_cores} physical"
        clock = f"{c.clock_ghz:.2f} GHz ({c.clock_source})" if c.clock_ghz else "unknown"
        rows = [
            ("CPU", c.model),
            ("cores", cores),
            ("clock", clock),
        ]
        if self.clock is not None and self.clock.kind == "measured":
            rows.append(("clock, measured", f"{self.clock.ghz:.2f} GHz with every core busy, "
                                            f"{self.clock.single_ghz:.2f} GHz one core alone"))
        rows += [
            ("ISA features", isa),
            ("torch CPU kernels", c.torch_capability),
            ("caches", _cache_row(c)),
            ("memory", f"{self.memory_gib:.1f} GiB"),
        ]
        rows += [(k, str(v)) for k, v in self.torch_build.items()]
        if self.gpus:
            for g in self.gpus:
                rows.append(
                    (f"GPU {g.index}", f"{g.name}, {g.memory_gib:.1f} GiB, compute capability "
                                       f"{g.compute_capability}, {g.sm_count} SMs" +
                                       (f", {g.memory_gbps:,.0f} GB/s memory (theoretical)"
                                        if g.memory_gbps else ""))
                )
        else:
            rows.append(("GPU", self.gpu_note))
        rows.append(("Apple MPS", "available" if self.mps else "not available"))
        return rows

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        lines = ["| item | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.rows()]
        return "\n".join(lines)


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:g} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:g} KiB"


def _cache_row(c: CPUInfo) -> str:
    """'L1d 48 KiB, L2 1 MiB, L3 32 MiB (one cache each; shared by 1, 1 and 2 logical CPUs)'."""
    sizes = ", ".join(f"{k} {_size(v)}" for k, v in c.caches.items())
    if not sizes:
        return "unknown"
    shared = [str(c.cache_sharing[k]) for k in c.caches if k in c.cache_sharing]
    if len(shared) != len(c.caches):
        return sizes + " (the size of one cache)"
    counts = ", ".join(shared[:-1]) + " and " + shared[-1] if len(shared) > 1 else shared[0]
    return f"{sizes} (one cache each; shared by {counts} logical CPUs)"


def _cpu_count(cpu_list: str) -> int:
    """How many CPUs a sysfs list such as '0-3,8' names; 0 for an empty one."""
    count = 0
    for part in cpu_list.strip().split(","):
        first, _, last = part.partition("-")
        if first.strip().isdigit():
            count += int(last) - int(first) + 1 if last.strip().isdigit() else 1
    return count


def _caches(sharing: dict[str, int] | None = None) -> dict[str, int]:
    """Per-cache sizes of CPU 0 from sysfs (Linux) or sysctl (macOS); {} when unknown. Where
    sysfs says how many logical CPUs share each cache, ``sharing`` is filled with it."""
    found: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind = _read(str(index / "level")).strip(), _read(str(index / "type")).strip()
        size = _read(str(index / "size")).strip().upper()
        if not level or kind == "Instruction" or not size:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        value = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        name = f"L{level}" + ("d" if kind == "Data" else "")
        found[name] = value
        shared = _cpu_count(_read(str(index / "shared_cpu_list")))
        if sharing is not None and shared:
            sharing[name] = shared
    if not found and sys.platform == "darwin":
        for name, key in (("L1d", "hw.l1dcachesize"), ("L2", "hw.l2cachesize"),
                          ("L3", "hw.l3cachesize")):
            if _sysctl(key).isdigit() and int(_sysctl(key)):
                found[name] = int(_sysctl(key))
    return found


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_info() -> CPUInfo:
    """Describe the CPU; unknowns stay None.

    Core counts, clock and memory come from psutil. The model name, vendor, family and ISA
    flags (AVX2, AVX-512, AMX...) are not in psutil, nor in the standard library: they are read
    from /proc/cpuinfo (Linux) or sysctl (macOS).
    """
    arch = platform.machine()
    model, vendor, flags = platform.processor() or arch, "", set()
    family = model_number = None
    clock, clock_source = None, "unknown"
    text = _read("/proc/cpuinfo")
    if text:
        first = text.split("\n\n")[0]
        info = dict(
            (k.strip(), v.strip()) for k, _, v in
            (line.partition(":") for line in first.splitlines()) if k.strip()
        )
        model = info.get("model name") or info.get("Model") or model
        vendor = info.get("vendor_id", "")
        flags = set((info.get("flags") or info.get("Features") or "").split())
        family = int(info["cpu family"]) if info.get("cpu family", "").isdigit() else None
        model_number = int(info["model"]) if info.get("model", "").isdigit() else None
        if info.get("cpu MHz"):
            clock = float(info["cpu MHz"]) / 1e3
            clock_source = "as reported by /proc/cpuinfo; boost clocks may be higher"
    elif sys.platform == "darwin":
        model = _sysctl("machdep.cpu.brand_string") or model
        vendor = "Apple" if arch == "arm64" else "GenuineIntel"
        if arch == "arm64":
            flags = {"asimd"}
        else:
            features = (_sysctl("machdep.cpu.features") + " " +
                        _sysctl("machdep.cpu.leaf7_features")).lower()
            flags = {f.replace(".", "_") for f in features.split()}
    try:  # psutil reads cpufreq (Linux) and sysctl (macOS); VMs often expose neither
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        freq = None
    if freq and freq.max:
        clock, clock_source = freq.max / 1e3, "maximum, from psutil.cpu_freq"
    sharing: dict[str, int] = {}
    caches = _caches(sharing)
    return CPUInfo(
        model=model,
        vendor=vendor,
        arch=arch,
        logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        physical_cores=psutil.cpu_count(logical=False),
        clock_ghz=clock,
        clock_source=clock_source,
        family=family,
        model_number=model_number,
        isa={k: k in flags for k in ISA_FLAGS},
        torch_capability=torch.backends.cpu.get_cpu_capability(),
        caches=caches,
        local=True,
        cache_sharing=sharing,
    )


_GPU_PROBE = r"""
import json, torch

def theoretical_gbps(p):
    # NVIDIA reports the memory clock in kHz and the bus width in bits; DDR memories (GDDR and
    # HBM alike) move data twice per clock. ROCm's properties do not follow this convention.
    if getattr(torch.version, "hip", None) or not getattr(p, "memory_bus_width", 0):
        return None
    return 2 * p.memory_clock_rate * 1e3 * p.memory_bus_width / 8 / 1e9

out = {"gpus": [], "cudnn": None, "nccl": None}
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out["gpus"].append(dict(index=i, name=p.name, memory_gib=p.total_memory / 2**30,
                                compute_capability=f"{p.major}.{p.minor}",
                                sm_count=p.multi_processor_count,
                                memory_gbps=theoretical_gbps(p), clock_ghz=getattr(p, "clock_rate", 0) / 1e6 or None))
    out["cudnn"] = torch.backends.cudnn.version()
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
print(json.dumps(out))
"""


def gpu_info(timeout: float = 120) -> tuple[list[GPUInfo], dict[str, Any], str]:
    """GPUs, cuDNN and NCCL versions, asked in a child process so this one stays CUDA-free.

    Returns (gpus, versions, note); the note says why the list is empty when it is.
    """
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return [], {}, "none (this torch is a CPU-only build)"
    try:
        done = subprocess.run([sys.executable, "-c", _GPU_PROBE], capture_output=True,
                              text=True, timeout=timeout)
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as err:
        return [], {}, f"unknown: the GPU probe failed ({err})"
    gpus = [GPUInfo(**g) for g in data["gpus"]]
    versions = {"cuDNN": data["cudnn"], "NCCL": data["nccl"]}
    return gpus, versions, "" if gpus else "none found by CUDA"


# BLAS_INFO in torch.__config__.show(), as torch's build scripts set it, and the library's name
_BLAS_NAMES = {"mkl": "MKL", "open": "OpenBLAS", "accelerate": "Accelerate", "atlas": "ATLAS",
               "ssl2": "Fujitsu SSL2", "generic": "a generic BLAS"}


def blas_library(config: str | None = None) -> str:
    """The BLAS library this torch calls for float32 and float64 matrix products on a CPU, as
    its build settings name it (``BLAS_INFO`` in ``torch.__config__.show()``, or ``config``)."""
    text = torch.__config__.show() if config is None else config
    found = re.search(r"BLAS_INFO=([\w.+-]+)", text)
    if found is None:
        return "MKL" if torch.backends.mkl.is_available() else "not named by this build"
    return _BLAS_NAMES.get(found.group(1).lower(), found.group(1))


def kernel_calls(fn: Callable[[], Any]) -> list[str]:
    """The calls into MKL and oneDNN that ``fn()`` made, in order, as those libraries log them.

    Each is ``"MKL SGEMM"`` (the BLAS function) or ``"oneDNN matmul (brg_matmul:avx512_core)"``
    (the primitive, and the implementation oneDNN picked for this CPU; a ``reorder`` converts a
    tensor between layouts). Empty where neither logged a call: the work ran in torch's own
    kernels, in a library that keeps no such log (OpenBLAS, Accelerate), or on a GPU. The
    libraries write the log to the process's standard output (file descriptor 1), which goes to
    a temporary file meanwhile: in a notebook it would otherwise land in the kernel's terminal.
    """
    with contextlib.ExitStack() as stack:
        if torch.backends.mkl.is_available():
            stack.enter_context(torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON))
        if torch.backends.mkldnn.is_available():
            stack.enter_context(torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON))
        text = _stdout_of(fn)
    return parse_kernel_log(text)


def _flush_c_stdout() -> None:
    try:  # C's stdio buffer, where the libraries' printf output may wait
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (Windows): nothing to do
        pass


def _stdout_of(fn: Callable[[], Any]) -> str:
    """What ``fn()`` wrote to file descriptor 1 (C code included), with Python's stdout flushed."""
    sys.stdout.flush()
    _flush_c_stdout()
    with tempfile.TemporaryFile() as log:
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            fn()
        finally:
            _flush_c_stdout()
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        return log.read().decode(errors="replace")


def parse_kernel_log(text: str) -> list[str]:
    """The calls in MKL's and oneDNN's verbose output (see :func:`kernel_calls`)."""
    calls = []
    for line in text.splitlines():
        mkl = re.match(r"MKL_VERBOSE\s+(\w+)\(", line)
        if mkl:
            calls.append(f"MKL {mkl.group(1)}")
            continue
        fields = line.strip().split(",")
        # oneDNN 3: onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core,...
        # oneDNN 2: dnnl_verbose,exec,cpu,convolution,jit:avx512_core,...
        if fields[0] in ("onednn_verbose", "dnnl_verbose") and "exec" in fields:
            i = fields.index("exec")
            if len(fields) > i + 3:
                calls.append(f"oneDNN {fields[i + 2]} ({fields[i + 3]})")
    return calls


def torch_build() -> dict[str, Any]:
    """Versions and build flags of the installed torch that decide which kernels exist."""
    mkldnn = torch.backends.mkldnn
    return {
        "torch": torch.__version__,
        "CUDA (build)": torch.version.cuda or "none",
        "ROCm (build)": getattr(torch.version, "hip", None) or "none",
        "BLAS": blas_library(),
        "oneDNN": "yes" if mkldnn.is_available() else "no",
        "OpenMP": "yes" if torch.backends.openmp.is_available() else "no",
        "intra-op threads": torch.get_num_threads(),
        "Python": platform.python_version(),
    }


def survey(probe_gpus: bool = True, measure_clock: bool = True) -> HardwareSurvey:
    """Everything this module finds out. Set ``probe_gpus=False`` to skip the child process,
    ``measure_clock=False`` to skip timing the clock (:mod:`torchhw.clock`, about half a second)."""
    build = torch_build()
    gpus, versions, note = gpu_info() if probe_gpus else ([], {}, "not probed")
    for key, value in versions.items():
        build[key] = value if value is not None else "none"
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    cpu = cpu_info()
    return HardwareSurvey(
        cpu=cpu,
        memory_gib=psutil.virtual_memory().total / 2**30,
        torch_build=build,
        gpus=gpus,
        gpu_note=note,
        mps=mps,
        clock=_measured_clock(cpu) if measure_clock else None,
    )


def _measured_clock(cpu: CPUInfo) -> Any:
    from . import clock

    return clock.best(cpu)


def cpu_short_name(cpu: CPUInfo) -> str:
    """A compact label such as 'AMD EPYC, 2 cores' for plot titles."""
    name = re.sub(r"\s+", " ", cpu.model).strip()
    return f"{name}, {cpu.physical_cores or cpu.logical_cores} cores"
