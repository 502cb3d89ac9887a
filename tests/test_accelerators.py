"""The course's decisions on machines this one is not, by presenting torch as each of them.

Each profile replaces torch's device *queries* (is there a GPU, how many, which compute
capability, is bf16 native, which macOS) with what a Colab T4, an A100, an H100, a node with two
GPUs, a one-GPU machine running two processes, an Apple-silicon Mac and an Intel XPU machine
answer. No kernel runs and nothing is measured: the tests check what the course *decides* there
(the device, the dtypes counted as fast, the knobs that apply and why, what notebook 10 trains,
the backend and device of every rank of 07, 08 and 10, what a report card says), and that the
notebooks' GPU code takes its decisions from these functions rather than from torch's defaults.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from torchhw import bench, cards, distributed, knobs, train, tune
from torchhw import device as devices

pytestmark = pytest.mark.accelerators
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@dataclass(frozen=True)
class Profile:
    name: str
    kind: str                       # "cuda", "mps" or "xpu"
    gpus: int = 1
    capability: tuple[int, int] = (0, 0)
    gpu_name: str = ""
    memory_gib: int = 16
    macos: tuple[int, int] = (15, 0)
    nprocs: int = 2                 # the processes a job starts here (07's and 10's default)


T4 = Profile("colab-t4", "cuda", 1, (7, 5), "Tesla T4", 15)
A100 = Profile("a100", "cuda", 1, (8, 0), "NVIDIA A100-SXM4-80GB", 80)
H100 = Profile("h100", "cuda", 1, (9, 0), "NVIDIA H100 80GB HBM3", 80)
NODE = Profile("node-2-gpus", "cuda", 2, (9, 0), "NVIDIA H100 80GB HBM3", 80)
SHARED = Profile("1-gpu-2-processes", "cuda", 1, (8, 6), "NVIDIA RTX A6000", 48, nprocs=2)
MAC = Profile("apple-silicon", "mps", 1, macos=(14, 5))
XPU = Profile("intel-xpu", "xpu", 1, gpu_name="Intel(R) Data Center GPU Max 1100")
PROFILES = [T4, A100, H100, NODE, SHARED, MAC, XPU]


@pytest.fixture
def present(monkeypatch):
    """present(profile): torch answers every device query as ``profile``'s machine would."""
    def apply(p: Profile) -> Profile:
        cuda, mps, xpu = p.kind == "cuda", p.kind == "mps", p.kind == "xpu"
        props = types.SimpleNamespace(name=p.gpu_name, major=p.capability[0], minor=p.capability[1],
                                      total_memory=p.memory_gib * 2**30, multi_processor_count=40,
                                      has_fp64=True, has_bfloat16_conversions=True)
        set_devices: list = []
        m = monkeypatch
        m.setattr(torch.cuda, "is_available", lambda: cuda)
        m.setattr(torch.cuda, "device_count", lambda: p.gpus if cuda else 0)
        m.setattr(torch.cuda, "get_device_capability", lambda d=None: p.capability)
        m.setattr(torch.cuda, "get_device_properties", lambda d=None: props)
        m.setattr(torch.cuda, "get_device_name", lambda d=None: p.gpu_name)
        m.setattr(torch.cuda, "set_device", lambda d: set_devices.append(str(d)))
        m.setattr(torch.cuda, "synchronize", lambda d=None: None)
        # torch's own semantics: with emulation counted (the default) any CUDA GPU says yes
        m.setattr(torch.cuda, "is_bf16_supported",
                  lambda including_emulation=True: cuda and (including_emulation or p.capability >= (8, 0)))
        m.setattr(torch.version, "cuda", "12.8" if cuda else None)
        m.setattr(torch.accelerator, "is_available", lambda: True)
        m.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: torch.device(p.kind))
        m.setattr(torch.accelerator, "device_count", lambda: p.gpus)
        m.setattr(torch.accelerator, "synchronize", lambda d=None: None)
        m.setattr(torch.backends.mps, "is_available", lambda: mps)
        m.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: p.macos >= (major, minor))
        m.setattr(torch.xpu, "is_available", lambda: xpu)
        m.setattr(torch.xpu, "device_count", lambda: p.gpus if xpu else 0)
        m.setattr(torch.xpu, "is_bf16_supported", lambda including_emulation=True: xpu)
        m.setattr(torch.xpu, "get_device_properties", lambda d=None: props)
        m.setattr(torch.xpu, "get_device_name", lambda d=None: p.gpu_name)
        m.setattr(torch.xpu, "set_device", lambda d: set_devices.append(str(d)))
        # a measurement here would time the CPU under a GPU's name: refuse it
        def no_measuring(*a, **k):
            raise AssertionError("a decision on an emulated machine must not time anything")
        m.setattr(bench, "matmul", no_measuring)
        apply.set_devices = set_devices
        return p
    return apply


def gpu(p: Profile) -> torch.device:
    return torch.device("mps") if p.kind == "mps" else torch.device(p.kind, 0)


def small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 10))


def fresh_setup(p: Profile):
    batch = (torch.randn(4, 1, 8, 8), torch.randint(0, 10, (4,)))
    return lambda: knobs.Setup(small_cnn(), batch, gpu(p), 2, nn.functional.cross_entropy,
                               lambda params: torch.optim.SGD(params, lr=0.1))


# ------------------------------------------------------------------ the device and its dtypes

@pytest.mark.parametrize("p", PROFILES, ids=lambda p: p.name)
def test_auto_takes_the_accelerator_and_names_it(present, p):
    present(p)
    assert devices.pick_device("auto") == gpu(p)
    assert devices.accelerator() == p.kind
    if p.kind != "mps":
        assert p.gpu_name in devices.describe(gpu(p))
        with pytest.raises(devices.DeviceUnavailable, match=f"only {p.gpus}"):
            devices.pick_device(f"{p.kind}:{p.gpus}")


# None: native; a string: lacks or emulates it (the reason names why)
FAST = {
    "colab-t4": {torch.bfloat16: "emulates", torch.float16: None, torch.float64: None},
    "a100": {torch.bfloat16: None, torch.float16: None, torch.float64: None},
    "h100": {torch.bfloat16: None, torch.float16: None, torch.float64: None},
    "node-2-gpus": {torch.bfloat16: None, torch.float16: None, torch.float64: None},
    "1-gpu-2-processes": {torch.bfloat16: None, torch.float16: None, torch.float64: None},
    "apple-silicon": {torch.bfloat16: None, torch.float16: None, torch.float64: "no float64"},
    "intel-xpu": {torch.bfloat16: None, torch.float16: None, torch.float64: None},
}


@pytest.mark.parametrize("p", PROFILES, ids=lambda p: p.name)
def test_dtypes_counted_as_fast_are_native_not_emulated(present, p):
    """Finding 4: torch.cuda.is_bf16_supported() counts emulation by default, so a T4 says yes;
    the course must not time bf16 there and call it applicable (00's sweep, 09, the tuner)."""
    present(p)
    for dtype, expected in FAST[p.name].items():
        why = devices.dtype_support(gpu(p), dtype)
        assert (why is None) == (expected is None), (dtype, why)
        if expected:
            assert expected in why
    for dtype, expected in FAST[p.name].items():
        if expected:   # not timed at all (bench.matmul would raise), and reported as not fast
            assert bench.has_fast_kernel(dtype, gpu(p)) == (False, 0.0)
            results, skipped = bench.dtype_sweep([64], [dtype], gpu(p))
            assert results == [] and expected in skipped[str(dtype).replace("torch.", "")]


def test_a_gpu_dtype_probe_is_never_launch_bound(present, monkeypatch):
    """A 128 x 128 product on a GPU costs one kernel launch in any dtype: a probe that small
    would call every dtype fast. A CUDA GPU is not timed at all (its compute capability says
    what it has); an Apple GPU is probed on products large enough to show its rate. The rates
    here are placeholders (nothing runs): only the probe's size is read."""
    present(A100)
    assert bench.has_fast_kernel(torch.float16, gpu(A100))[0] is True   # bench.matmul would raise
    present(MAC)
    sizes = []

    def probe(n, dtype, *a, **k):
        sizes.append(n)
        return types.SimpleNamespace(gflops=1.0)
    monkeypatch.setattr(bench, "matmul", probe)
    bench.has_fast_kernel(torch.bfloat16, gpu(MAC))
    assert sizes and min(sizes) >= bench.GPU_PROBE_N == bench.probe_size("mps")


def test_fp32_without_autocast_opens_no_autocast_region(monkeypatch):
    """A disabled autocast region still checks its dtype on MPS (torch 2.6-2.9) and warns at
    every step: the fp32 baseline must not open one."""
    opened = []
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: opened.append((a, k)))
    knobs.Configured(small_cnn(), False, None)(torch.randn(2, 1, 8, 8))
    assert opened == []


def test_mps_fp16_needs_a_torch_whose_grad_scaler_avoids_float64(present, monkeypatch):
    present(MAC)
    setup = fresh_setup(MAC)
    fp16 = next(k for k in knobs.default_knobs() if knobs.label(k) == "autocast=float16")
    monkeypatch.setattr(torch, "__version__", "2.7.1")
    assert "torch 2.8" in fp16.check(setup())
    monkeypatch.setattr(torch, "__version__", "2.8.0")
    assert fp16.check(setup()) is None


def test_mac_before_sonoma_has_no_bf16(present):
    present(Profile("old-mac", "mps", macos=(13, 6)))
    assert "macOS 14" in devices.dtype_support(torch.device("mps"), torch.bfloat16)


# ------------------------------------------------------------------ the knobs, and what 10 trains

APPLICABLE = {
    "colab-t4": {"channels_last=True", "autocast=float16", "batch_size=double"},
    "a100": {"channels_last=True", "autocast=bfloat16", "autocast=float16", "tf32=True",
             "batch_size=double"},
    "apple-silicon": {"channels_last=True", "autocast=bfloat16", "autocast=float16",
                      "batch_size=double", "optimizer=foreach"},
    "intel-xpu": {"channels_last=True", "autocast=bfloat16", "autocast=float16", "batch_size=double"},
}
APPLICABLE["h100"] = APPLICABLE["node-2-gpus"] = APPLICABLE["1-gpu-2-processes"] = APPLICABLE["a100"]


@pytest.mark.parametrize("p", PROFILES, ids=lambda p: p.name)
def test_knobs_that_apply_and_why_the_others_do_not(present, p):
    present(p)
    applicable, reasons = tune.applicability(knobs.default_knobs(), fresh_setup(p))
    assert {knobs.label(k) for k in applicable} == APPLICABLE[p.name]
    if p is T4:
        assert "sm 7.5" in reasons["tf32=True"] and "8.0" in reasons["tf32=True"]
        assert "emulates" in reasons["autocast=bfloat16"]
    if p.kind == "cuda":
        assert "foreach implementation on cuda by default" in reasons["optimizer=foreach"]
        # finding 5: cuDNN's plans are cached per thread, backward's on autograd's shared one,
        # so no trial of this process could measure benchmark = True
        assert "autograd's thread" in reasons["cudnn_benchmark=True"]
    assert "CPU work" in reasons["threads=half"]
    # what a report card keeps of them
    card = cards.build(_survey(), device=devices.describe(gpu(p)), peaks={},
                       measured={}, capstone={},
                       tuning={"trials": [], "recommended": {}, "recommended_trial": "baseline",
                               "gain": 1.0, "reasons": reasons})
    assert card["tuning"]["reasons"] == reasons
    if p.kind != "mps":
        assert p.gpu_name in card["device"]


_SURVEY: list = []


def _survey():
    """This machine's CPU survey (the card's machine part), taken once, without probing GPUs."""
    from torchhw import hardware

    if not _SURVEY:
        _SURVEY.append(hardware.survey(probe_gpus=False))
    return _SURVEY[0]


def _everything(p: Profile) -> dict:
    """The largest configuration the tuner could recommend here (one autocast dtype)."""
    applicable, _ = tune.applicability(knobs.default_knobs(), fresh_setup(p))
    config = {}
    for k in applicable:
        if k.group == "autocast" and "autocast" in config:
            continue
        config[k.name] = k.value
    if p.kind == "cuda":
        config["autocast"] = "float16"   # the one that needs a GradScaler
    return config


def test_the_measured_gpu_roof_comes_from_products_that_fill_a_gpu():
    """A 512 x 512 product leaves most of an A100 idle: a roof measured on it is too low, and
    the ridge, the bound verdicts and the card's utilisation with it (00, 09, 10)."""
    assert bench.GPU_ROOF_N >= 4096
    for nb, piece in (("09", "bench.GPU_ROOF_N"), ("10", "bench.GPU_ROOF_N"), ("00", "bench.GPU_ROOF_N")):
        assert piece in _code(next(NOTEBOOKS.glob(f"{nb}_*.ipynb"))), nb
    roof = _cell_source("10_capstone.ipynb", "measured_rates = {")
    assert "bench.matmul(512" not in roof


@pytest.mark.parametrize("p", [T4, A100, NODE, MAC, XPU], ids=lambda p: p.name)
def test_notebook_10_trains_every_knob_of_its_configuration(present, p):
    """Finding 9: every knob of the tuned configuration changes training through
    knobs.configure and knobs.prepare (10's `build`): TF32, cudnn.benchmark, a GradScaler for
    fp16; and a configuration without TF32 really is fp32 (finding 6)."""
    present(p)
    config = _everything(p)
    ready = knobs.prepare(knobs.configure(small_cnn(), config, threads=2, device=gpu(p)))
    line = ready.describe()
    assert ready.model.channels_last and "channels_last" in line
    assert ready.batch_factor == 2 and "2x the batch" in line
    if p.kind == "cuda":
        assert ready.scaler is not None and "GradScaler" in line
        with ready.settings():
            assert devices.tf32_enabled() == {"matmul": "tf32" in config, "conv": "tf32" in config}
            # what torch.compile's Inductor reads must stay readable (no mixed legacy/new API)
            assert torch.get_float32_matmul_precision() == ("high" if "tf32" in config else "highest")
            assert torch.backends.cudnn.allow_tf32 is ("tf32" in config)
        baseline = knobs.prepare(knobs.configure(small_cnn(), {}, threads=2, device=gpu(p)))
        with baseline.settings():   # torch's default would leave convolutions in TF32
            assert devices.tf32_enabled() == {"matmul": False, "conv": False}
            assert torch.backends.cudnn.benchmark is False
        assert "full precision" in baseline.describe()
    assert torch.backends.cudnn.benchmark is False, "the settings must be restored"
    # a configuration that cannot apply here is refused, not silently half-applied
    if p is T4:
        with pytest.raises(ValueError, match="tf32=True cannot apply here"):
            knobs.configure(small_cnn(), {"tf32": True}, threads=2, device=gpu(p))


def test_cudnn_benchmark_is_measured_in_fresh_processes_and_never_trained_unmeasured(present):
    """Finding 5: a cuDNN plan cached for a shape is used whether benchmark is on or not, per
    thread, and backward convolutions run on autograd's thread, shared by the whole process.
    09 times each setting in a process of its own; the tuner does not offer it, and a
    configuration that asks for it on CUDA is refused rather than trained unmeasured."""
    present(A100)
    with pytest.raises(ValueError, match="fresh processes"):
        knobs.configure(small_cnn(), {"cudnn_benchmark": True}, threads=2, device="cuda:0")
    cell = _cell_source("09_performance.ipynb", "cudnn_trial")
    assert "distributed.launch(cudnn_trial.seconds_per_step, 1" in cell
    assert "torch.backends.cudnn.benchmark = benchmark" in cell   # set before the first convolution


def test_deterministic_runs_ask_the_gpu_for_deterministic_kernels(present, monkeypatch):
    """Finding 7: bitwise resume on a GPU needs deterministic algorithms and cuBLAS's workspace
    setting; train.deterministic gives both and restores everything."""
    present(A100)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.backends.cudnn.benchmark = True
    try:
        with train.deterministic("cuda:0"):
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
            import os
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == devices.CUBLAS_DETERMINISTIC
        assert not torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    finally:
        torch.backends.cudnn.benchmark = False


def test_notebook_setup_sets_cublas_workspace_on_cuda(present, monkeypatch, capsys):
    from torchhw.notebook import setup

    present(T4)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert setup(device="auto") == torch.device("cuda", 0)
    import os
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == devices.CUBLAS_DETERMINISTIC
    assert "Tesla T4" in capsys.readouterr().out


# ------------------------------------------------------------------ every rank's device and backend

RANKS = {   # (backend, devices, a word the note must hold or "")
    "colab-t4": ("gloo", ["cuda:0", "cuda:0"], "share"),
    "a100": ("gloo", ["cuda:0", "cuda:0"], "share"),
    "h100": ("gloo", ["cuda:0", "cuda:0"], "share"),
    "node-2-gpus": ("nccl", ["cuda:0", "cuda:1"], ""),
    "1-gpu-2-processes": ("gloo", ["cuda:0", "cuda:0"], "host memory"),
    "apple-silicon": ("gloo", ["cpu", "cpu"], "MPS"),
    "intel-xpu": ("gloo", ["xpu:0", "xpu:0"], "share"),
}


@pytest.mark.parametrize("p", PROFILES, ids=lambda p: p.name)
def test_ranks_of_07_and_10(present, p):
    """Findings 2 and 8: the ranks of 07 (device=device) and 10 (device=device.type) run on
    the machine's GPUs, with NCCL only where each has its own; two ranks on one GPU are said."""
    present(p)
    backend, ranks, word = RANKS[p.name]
    for asked in (gpu(p), gpu(p).type):
        where = distributed.plan(p.nprocs, asked)
        assert (where.backend, where.devices) == (backend, ranks)
        assert (word in where.note) if word else where.note == ""
    if p is NODE:
        assert distributed.plan(2, "cuda").backend == devices.backend_for("cuda") == "nccl"
    if p is NODE:   # one rank asked for on the second GPU stays there (09's cuDNN trial)
        assert distributed.plan(1, "cuda:1").devices == ["cuda:1"]
        assert distributed.plan(1, "cuda").devices == ["cuda:0"]
        with pytest.raises(ValueError, match="cuda:2 but this machine has 2 CUDA GPU"):
            distributed.plan(1, "cuda:2")
    if p is XPU:
        two = Profile("two-xpus", "xpu", 2)
        present(two)
        assert distributed.plan(2, "xpu").backend == "xccl"


def _cell_source(notebook: str, marker: str) -> str:
    cells = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    found = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(found) == 1, f"{notebook}: {len(found)} cells hold {marker!r}"
    return found[0]


def _module_from_writefile(notebook: str, name: str, monkeypatch) -> types.ModuleType:
    source = None
    cells = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    for c in cells:
        text = "".join(c["source"])
        first, _, body = text.partition("\n")
        if first.startswith("%%writefile") and first.endswith(f"/{name}.py"):
            source = body
    assert source, f"{notebook} writes no {name}.py"
    module = types.ModuleType(name)
    exec(compile(source, f"{notebook}:{name}.py", "exec"), module.__dict__)
    return module


class _Joined(Exception):
    pass


_DEVICE_IDS: list = []  # what the training script gave init_generation as device_id


def _ranks_of_train(p: Profile, present, monkeypatch, *flags: str) -> list[tuple[str, str]]:
    """Run the course's training script (what 08 and the job files run) up to joining the
    process group, for two simulated nodes of one rank each (each LOCAL_RANK 0, as torchrun
    numbers them), and return each rank's (backend, device)."""
    from torchhw.distributed import train as script

    present(p)
    got = []
    for rank in range(2):
        joined = {}

        def init_generation(backend, joined=joined, **timeouts):
            joined["backend"] = backend
            _DEVICE_IDS.append(timeouts.get("device_id"))
            raise _Joined
        monkeypatch.setattr(script, "init_generation", init_generation)
        present.set_devices.clear()
        for k, v in {"RANK": rank, "LOCAL_RANK": 0, "WORLD_SIZE": 2, "LOCAL_WORLD_SIZE": 1,
                     "GROUP_RANK": rank}.items():
            monkeypatch.setenv(k, str(v))
        monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
        with pytest.raises(_Joined):
            script.main(["--checkpoint", "c.pt", "--out", "o.json", "--device", p.kind, *flags])
        got.append((joined["backend"], present.set_devices[-1] if present.set_devices else "cpu"))
    return got


def test_two_simulated_nodes_never_put_two_nccl_ranks_on_one_gpu(present, monkeypatch):
    """Finding 1: each simulated node counts its ranks from LOCAL_RANK 0; with --one-machine the
    ranks spread over this machine's GPUs (NCCL, a GPU each); too few GPUs is an error unless
    sharing them over gloo is asked for (08 asks, a production job does not)."""
    assert _ranks_of_train(NODE, present, monkeypatch, "--one-machine") == [("nccl", "cuda:0"), ("nccl", "cuda:1")]
    with pytest.raises(RuntimeError, match="needs one GPU per process"):
        _ranks_of_train(T4, present, monkeypatch, "--one-machine")
    assert _ranks_of_train(T4, present, monkeypatch, "--one-machine", "--share-gpus") == \
        [("gloo", "cuda:0"), ("gloo", "cuda:0")]
    # on a real cluster each node's LOCAL_RANK 0 has a GPU of its own
    assert _ranks_of_train(T4, present, monkeypatch) == [("nccl", "cuda:0"), ("nccl", "cuda:0")]
    cell = _cell_source("08_clusters.ipynb", "def train_args(")
    assert "--one-machine" in cell and "--share-gpus" in cell


def test_the_process_group_is_bound_to_the_rank_s_gpu(present, monkeypatch):
    """With NCCL the script passes its GPU as device_id (eager communicator, no guessing);
    on a CPU, and over gloo on shared GPUs, it passes none."""
    _DEVICE_IDS.clear()
    _ranks_of_train(NODE, present, monkeypatch, "--one-machine")
    assert [str(d) for d in _DEVICE_IDS] == ["cuda:0", "cuda:1"]
    _DEVICE_IDS.clear()
    _ranks_of_train(T4, present, monkeypatch, "--one-machine", "--share-gpus")
    assert _DEVICE_IDS == [None, None]


def test_a_node_with_fewer_gpus_than_processes_fails_loudly(present, monkeypatch):
    from torchhw.distributed import train as script

    present(T4)
    for k, v in {"RANK": 1, "LOCAL_RANK": 1, "WORLD_SIZE": 2, "LOCAL_WORLD_SIZE": 2}.items():
        monkeypatch.setenv(k, str(v))
    args = script.parser.parse_args(["--checkpoint", "c", "--out", "o", "--device", "cuda"])
    with pytest.raises(RuntimeError, match=r"2 processes on this node but only 1 CUDA GPU.*--nproc-per-node=1"):
        script.place(args)


# ------------------------------------------------------------------ 07's communication timing

class _FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing=False, **_):
        self.at = None

    def record(self, stream=None):
        self.at = _FakeEvent.clock[0]

    def elapsed_time(self, other):
        return (other.at - self.at) * 1e3


def test_time_on_device_reads_the_gpu_clock_on_the_device_own_stream(present, monkeypatch):
    present(NODE)
    streams = []
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: streams.append(str(d)) or "s1")

    class Event(_FakeEvent):
        def __init__(self, device=None, enable_timing=False, **_):
            assert str(device) == "cuda:1" and enable_timing
            super().__init__()

        def record(self, stream=None):
            assert stream == "s1"   # cuda:1's stream, whichever device is current
            super().record()

        def synchronize(self):
            pass
    monkeypatch.setattr(torch, "Event", Event)

    def work():
        _FakeEvent.clock[0] += 0.5   # the device's clock advances by what the work took
    _FakeEvent.clock[0] = 0.0
    assert devices.time_on_device(work, "cuda:1") == pytest.approx(0.5)
    assert streams == ["cuda:1"]


def test_07_times_nccl_all_reduce_on_the_gpu_clock_not_at_enqueue(present, monkeypatch):
    """Finding 3: an NCCL future completes when the all-reduce is queued. The hook's span must
    end at an event recorded in the future's callback (GPU time), not at a host-clock read."""
    present(H100)
    monkeypatch.setitem(sys.modules, "ddp_train", types.SimpleNamespace(wrap=None))
    measure = _module_from_writefile("07_ddp.ipynb", "measure", monkeypatch)
    monkeypatch.setattr(torch, "Event", _FakeEvent)
    queued = []

    class Work:
        def get_future(self):
            fut = torch.futures.Future()
            queued.append(fut)
            return fut

    monkeypatch.setattr(measure.dist, "get_world_size", lambda: 2)
    backend = ["nccl"]
    monkeypatch.setattr(measure.dist, "get_backend", lambda group=None: backend[0])
    monkeypatch.setattr(measure.dist, "all_reduce", lambda t, async_op: Work())
    bucket = types.SimpleNamespace(buffer=lambda: torch.ones(4))
    state = {"device": torch.device("cuda", 0), "spans": []}
    _FakeEvent.clock[0] = 0.0
    out = measure.timing_hook(state, bucket)
    _FakeEvent.clock[0] = 0.25               # the GPU finishes the all-reduce 0.25 s later
    queued[0].set_result([torch.ones(4)])
    out.wait()
    assert len(state["spans"]) == 1
    assert measure.span_seconds(state["spans"][0]) == pytest.approx(0.25)
    # gloo, on a CPU or on a GPU shared by two ranks (a T4): its future completes when the
    # all-reduce has, through host memory, so the host clock is the right one there
    for where in (torch.device("cpu"), torch.device("cuda", 0)):
        backend[0] = "gloo"
        spans = {"device": where, "spans": []}
        measure.timing_hook(spans, bucket)
        queued[-1].set_result([torch.ones(4)])
        assert isinstance(spans["spans"][0], float)


# ------------------------------------------------------------------ the notebooks use the decisions

def _code(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_every_launch_in_the_notebooks_names_its_device():
    """Finding 2's class: a launch without device= runs on the CPU with gloo on a GPU machine."""
    missing = []
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):
        for line_no, call in _calls(_code(nb), "launch"):
            if not any(k.arg == "device" for k in call.keywords):
                missing.append(f"{nb.name}: line {line_no}")
    assert not missing, missing


def _calls(code: str, name: str):
    text = "\n".join(l for l in code.splitlines() if not l.lstrip().startswith(("%", "!")))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name):
                yield node.lineno, node


def test_no_capability_test_counts_emulation():
    """Finding 4's class, everywhere: is_bf16_supported() without including_emulation=False."""
    sources = {p.name: p.read_text() for p in (Path(devices.__file__).parent).rglob("*.py")}
    sources.update({nb.name: _code(nb) for nb in NOTEBOOKS.glob("*.ipynb")})
    for name, text in sources.items():
        for call in re.findall(r"is_bf16_supported\(([^)]*)\)", text):
            assert "including_emulation=False" in call or name.endswith("test_accelerators.py"), name


def test_gpu_paths_of_the_notebooks_take_the_course_decisions():
    nb = {p.name[:2]: _code(p) for p in NOTEBOOKS.glob("*.ipynb")}
    # 04 and 10: the bitwise resume runs under deterministic kernels (finding 7)
    assert "train.deterministic(device)" in nb["04"] and "train.deterministic(device)" in nb["10"]
    # 07: the plan is printed, so two ranks on one GPU are said (finding 8)
    assert "distributed.plan(nprocs, device)" in nb["07"]
    # 07's FSDP count: never NCCL with two ranks on one GPU (its device mesh would ask for it)
    assert 'device="cpu" if sharing else device' in nb["07"]
    # 09: true fp32 baselines on CUDA (finding 6)
    assert 'set_fp32_precision("ieee")' in nb["09"]
    # 10: every epoch through the configuration's settings, call and GradScaler (finding 9)
    run = _cell_source("10_capstone.ipynb", "class Run:")
    for piece in ("self.ready.settings()", "scaler=self.ready.scaler",
                  "batch_size=self.ready.batch_size("):
        assert piece in run, piece
    assert "device=device" in _cell_source("10_capstone.ipynb", "def build(config)")


@pytest.mark.parametrize("p", [T4, NODE, MAC, XPU], ids=lambda p: p.name)
def test_06_puts_the_model_where_dataparallel_looks_for_it(present, monkeypatch, p):
    """DataParallel keeps XPU and MTIA devices too, not only CUDA ones (torch's
    _get_available_device_type), and leaves MPS out: 06 must move the model to the device
    DataParallel chose (src_device_obj), never to a hard-coded cuda device."""
    present(p)
    moved = []
    monkeypatch.setattr(nn.Module, "to", lambda self, *a, **k: moved.append(torch.device(*a)) or self)
    cell = _cell_source("06_data_parallel.ipynb", "dp = nn.DataParallel(dp_model)")
    end = cell.index("dp_model.to(first_device)") + len("dp_model.to(first_device)")
    scope = {"copy": copy, "nn": nn, "torch": torch, "model": nn.Linear(2, 2)}
    exec(cell[:end], scope)
    want = torch.device("cpu") if p.kind == "mps" else torch.device(p.kind, 0)
    assert scope["first_device"] == want
    assert moved and moved[-1] == want
