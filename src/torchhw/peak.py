"""A CPU's theoretical peak FLOP/s: cores x FLOP per cycle x clock, or unknown with the reason.

    from torchhw import hardware, peak
    peak.flops(hardware.cpu_info(), torch.float32)   # Peak: GFLOP/s and how it was derived

The clock is the one the cores really run at (:mod:`torchhw.clock` measures it) when the CPU is
this machine's, else the one its description reports; the peak's ``basis`` says which. The FLOP
per cycle come from the vector FMA units of the cores this table knows (AMD Zen,
Intel AVX2 and AVX-512) and the matrix tiles (AMX) for bf16 and fp16. Where a core is not in
the table, or the OS does not report a clock, the peak is "unknown" with the reason: a guessed
peak would make every "percent of peak" in the course a guess too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import clock as _clock
from .hardware import ISA_FLAGS, CPUInfo, cpu_info


@dataclass
class Peak:
    """A theoretical peak: ``gflops`` is None when it cannot be derived honestly."""

    dtype: str
    gflops: float | None
    basis: str
    cores: int | None = None
    flops_per_cycle: float | None = None
    clock: _clock.Clock | None = None

    def implied_clock_ghz(self, measured_gflops: float) -> float | None:
        """The clock a measured rate implies, if every FMA unit was busy every cycle: a lower
        bound on the clock the vector units ran at, where ``flops_per_cycle`` is the most the
        core can do (a rate at fewer FLOP per cycle needs a faster clock)."""
        if not self.cores or not self.flops_per_cycle:
            return None
        return measured_gflops / (self.cores * self.flops_per_cycle)

    def __str__(self) -> str:
        if self.gflops is None:
            return f"{self.dtype} peak: unknown ({self.basis})"
        return f"{self.dtype} peak: {self.gflops:,.0f} GFLOP/s = {self.basis}"


# Intel's client cores with AVX-512, which have one 512-bit FMA unit: Ice Lake (0x7D, 0x7E),
# Tiger Lake (0x8C, 0x8D), Rocket Lake (0xA7). A virtual machine may report any model number, so
# a CPU that also reports AMX (server cores only) is taken as a server core whatever it reports.
_INTEL_CLIENT_AVX512 = {0x7D, 0x7E, 0x8C, 0x8D, 0xA7}


def _fp32_flops_per_cycle(cpu: CPUInfo) -> tuple[int | None, str]:
    """fp32 FLOP per cycle per core from the vector FMA units, where the core is known."""
    isa = cpu.isa
    if cpu.vendor == "AuthenticAMD" and cpu.family is not None:
        if cpu.family == 0x17:  # Zen/Zen+ split 256-bit ops over 128-bit units; Zen 2 does not
            if (cpu.model_number or 0) < 0x30:
                return 16, "Zen 1: 2 FMA units x 128 bit"
            return 32, "Zen 2: 2 FMA units x 256 bit"
        if cpu.family == 0x19:
            if isa.get("avx512f"):
                return 32, "Zen 4: 2 FMA units x 256 bit (AVX-512 runs as two halves)"
            return 32, "Zen 3: 2 FMA units x 256 bit"
        if cpu.family == 0x1A:
            return 64, ("Zen 5: 2 FMA units x 512 bit; an upper bound: laptop parts have a "
                        "256-bit datapath and reach half")
    if cpu.vendor == "GenuineIntel":
        if isa.get("avx512f") and not isa.get("amx_tile") and cpu.model_number in _INTEL_CLIENT_AVX512:
            return 32, "Intel client core with AVX-512 (Ice Lake, Tiger Lake, Rocket Lake): 1 FMA unit x 512 bit"
        if isa.get("avx512f"):
            return 64, ("Intel AVX-512: 2 FMA units x 512 bit; an upper bound: Xeon Silver and "
                        "Bronze parts with one unit reach half")
        if isa.get("avx2") and isa.get("fma"):
            return 32, "Intel AVX2: 2 FMA units x 256 bit"
    return None, f"no table entry for {cpu.model!r} ({cpu.vendor or cpu.arch})"


# half-precision types: (AMX flag, AVX-512 flag, why there is no peak without either)
_HALF = {
    torch.bfloat16: ("amx_bf16", "avx512_bf16",
                     "no bf16 instructions: bf16 products take a generic fallback kernel"),
    torch.float16: ("amx_fp16", "avx512_fp16", "no fp16 arithmetic instructions on this CPU"),
}


def flops(cpu: CPUInfo | None = None, dtype: torch.dtype = torch.float32,
          cores: int | None = None, clock: _clock.Clock | float | None = None) -> Peak:
    """Theoretical CPU peak for ``dtype``: cores x FLOP/cycle x clock, or unknown with why.

    ``cores`` defaults to every physical core; pass the thread count a benchmark used.
    Uses physical cores (SMT threads share the FMA units). ``clock``: None takes, for this
    machine's CPU, the clock measured with ``cores`` cores busy (:func:`torchhw.clock.best`,
    which falls back to the boost or reported clock where it cannot measure), and for a CPU
    described by hand its reported ``clock_ghz``; a :class:`~torchhw.clock.Clock` or GHz is used
    as given. With a reported base clock, a measured rate above the peak means the cores were
    boosting. fp16 has no native arithmetic without AVX-512 FP16 or AMX FP16, so its peak is
    reported as unknown rather than guessed.
    """
    cpu = cpu or cpu_info()
    name = str(dtype).replace("torch.", "")
    per_cycle, why = _fp32_flops_per_cycle(cpu)
    # SMT threads share their core's FMA units: more threads than cores add no peak
    cores = min(cores or cpu.physical_cores or cpu.logical_cores,
                cpu.physical_cores or cpu.logical_cores)
    if per_cycle is None:
        return Peak(name, None, why)
    if clock is None:
        clock = (_clock.best(cpu, cores) if cpu.local else
                 _clock.Clock(cpu.clock_ghz, "reported", cpu.clock_source))
    elif not isinstance(clock, _clock.Clock):
        clock = _clock.Clock(float(clock), "given", "given by the caller")
    if clock.ghz is None:
        return Peak(name, None, "clock speed not reported by this OS", clock=clock)
    scale, note = 1.0, ""
    if dtype == torch.float64:
        scale, note = 0.5, ", fp64 at half the fp32 rate"
    elif dtype in _HALF:
        amx, avx, missing = _HALF[dtype]
        if cpu.isa.get(amx):
            per_cycle, why = 1024, f"{ISA_FLAGS[amx]} tiles: 1024 FLOP/cycle"
        elif cpu.isa.get(avx):
            scale, note = 2.0, f", {name} at twice the fp32 rate ({ISA_FLAGS[avx]})"
        else:
            return Peak(name, None, missing)
    elif dtype != torch.float32:
        return Peak(name, None, f"no peak model for {name}")
    gflops = cores * per_cycle * scale * clock.ghz
    basis = (f"{cores} cores x {per_cycle * scale:g} FLOP/cycle x {clock.ghz:.2f} GHz "
             f"{clock.kind} ({why}{note})")
    return Peak(name, gflops, basis, cores, per_cycle * scale, clock)
