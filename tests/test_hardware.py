import json
import subprocess
import sys

import pytest
import torch

from torchhw import hardware, peak
from torchhw.hardware import CPUInfo


def cpu(vendor="AuthenticAMD", family=0x19, model=0x11, cores=2, clock=2.6, **isa):
    flags = {k: False for k in hardware.ISA_FLAGS}
    flags.update(isa)
    return CPUInfo("test cpu", vendor, "x86_64", cores, cores, clock, "test", family, model, flags)


def test_report_describes_this_machine():
    report = hardware.survey()
    assert report.cpu.logical_cores >= 1
    assert report.memory_gib > 0.5
    assert report.torch_build["torch"] == torch.__version__
    assert set(report.cpu.isa) == set(hardware.ISA_FLAGS)
    assert report.cpu.torch_capability == torch.backends.cpu.get_cpu_capability()
    json.dumps(report.to_dict())  # the runner stores it as JSON
    text = str(report)
    assert "CPU" in text and "memory" in text
    assert report._repr_markdown_().startswith("| item | value |")


def test_report_lists_gpus_or_says_why_not():
    report = hardware.survey()
    if torch.cuda.is_available():
        assert len(report.gpus) == torch.cuda.device_count()
        assert all(g.sm_count > 0 and g.memory_gib > 0 for g in report.gpus)
    else:
        assert report.gpus == [] and report.gpu_note


def test_neither_import_nor_report_initialises_cuda():
    code = ("import torch, torchhw, torchhw.hardware as h, torchhw.bench, torchhw.course.runner\n"
            "h.survey()\nprint(torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("info, per_cycle", [
    (cpu(family=0x19, avx512f=True, avx2=True, fma=True), 32),   # Zen 4
    (cpu(family=0x19, avx2=True, fma=True), 32),                 # Zen 3
    (cpu(family=0x17, model=0x01, avx2=True, fma=True), 16),     # Zen 1
    (cpu(family=0x1A, avx512f=True), 64),                        # Zen 5
    (cpu(vendor="GenuineIntel", family=6, avx512f=True), 64),
    (cpu(vendor="GenuineIntel", family=6, avx2=True, fma=True), 32),
])
def test_peak_is_cores_times_flops_per_cycle_times_clock(info, per_cycle):
    best = peak.flops(info)
    assert best.gflops == pytest.approx(2 * per_cycle * 2.6)
    assert best.cores == 2 and best.flops_per_cycle == per_cycle
    assert best.implied_clock_ghz(best.gflops) == pytest.approx(2.6)
    assert peak.flops(info, cores=1).gflops == pytest.approx(per_cycle * 2.6)


def test_peak_for_other_dtypes():
    zen4 = cpu(avx512f=True, avx512_bf16=True)
    fp32 = peak.flops(zen4).gflops
    assert peak.flops(zen4, torch.bfloat16).gflops == pytest.approx(2 * fp32)
    assert peak.flops(zen4, torch.float64).gflops == pytest.approx(fp32 / 2)
    half = peak.flops(zen4, torch.float16)
    assert half.gflops is None and "fp16" in half.basis
    assert peak.flops(cpu(), torch.bfloat16).gflops is None
    spr = cpu(vendor="GenuineIntel", family=6, avx512f=True, amx_bf16=True, avx512_fp16=True)
    assert peak.flops(spr, torch.bfloat16).gflops == pytest.approx(2 * 1024 * 2.6)
    assert peak.flops(spr, torch.float16).gflops == pytest.approx(2 * 128 * 2.6)


def test_peak_is_unknown_rather_than_guessed():
    apple = CPUInfo("Apple M2", "Apple", "arm64", 8, 8, None, "unknown", isa={"asimd": True})
    best = peak.flops(apple)
    assert best.gflops is None and "Apple M2" in best.basis
    assert "unknown" in str(best)
    no_clock = cpu(clock=None, avx2=True, fma=True)
    assert peak.flops(no_clock).gflops is None


def test_the_blas_is_named_from_the_build_settings():
    assert hardware.blas_library("  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release") == "MKL"
    assert hardware.blas_library("BLAS_INFO=open, LAPACK_INFO=open") == "OpenBLAS"
    assert hardware.blas_library("BLAS_INFO=accelerate,") == "Accelerate"
    assert hardware.blas_library("BLAS_INFO=newblas, X=1") == "newblas"  # unknown: as the build says
    assert hardware.blas_library() == hardware.torch_build()["BLAS"]


def test_the_libraries_logs_are_read_in_both_oneDNN_formats():
    log = "\n".join([
        "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture",
        "MKL_VERBOSE SGEMM(N,N,256,256,256,0x7ff,0x55,256,0x55,256,0x7ff,0x55,256) 24.27ms NThr:2",
        "onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,undef,src:bf16,,"
        "256x256:256x256,11.13",
        "dnnl_verbose,exec,cpu,convolution,jit:avx512_core,forward_training,src_f32::blocked,,1.2",
        "something else printed meanwhile",
    ])
    assert hardware.parse_kernel_log(log) == [
        "MKL SGEMM", "oneDNN matmul (brg_matmul:avx512_core_bf16)",
        "oneDNN convolution (jit:avx512_core)"]


def test_kernel_calls_sees_which_library_ran_and_leaves_stdout_working(capfd):
    import torch.nn.functional as F

    x = torch.randn(64, 64)
    assert hardware.kernel_calls(lambda: x + x) == []   # torch's own kernel: no library call
    if torch.backends.mkl.is_available():
        assert "MKL SGEMM" in hardware.kernel_calls(lambda: torch.mm(x, x))
    if torch.backends.mkldnn.is_available():
        calls = hardware.kernel_calls(lambda: F.linear(x.to_mkldnn(), x).to_dense())
        assert any(c.startswith("oneDNN inner_product") for c in calls), calls
    print("still here")
    assert "still here" in capfd.readouterr().out


def test_cache_row_says_how_many_cpus_share_each_cache():
    c = cpu()
    c.caches = {"L1d": 48 * 2**10, "L2": 2**20, "L3": 32 * 2**20}
    c.cache_sharing = {"L1d": 2, "L2": 2, "L3": 16}
    assert hardware._cache_row(c) == ("L1d 48 KiB, L2 1 MiB, L3 32 MiB (one cache each; shared "
                                      "by 2, 2 and 16 logical CPUs)")
    c.cache_sharing = {}
    assert hardware._cache_row(c).endswith("(the size of one cache)")
    assert hardware._cpu_count("0-3,8,10-11") == 7 and hardware._cpu_count("") == 0
