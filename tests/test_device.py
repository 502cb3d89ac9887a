import pytest
import torch

from torchhw import device as dev
from torchhw.device import DeviceUnavailable, pick_device


def test_auto_takes_the_best_device_here():
    expected = "cuda" if dev.cuda_count() else "mps" if dev.mps_available() else "cpu"
    assert pick_device("auto").type == expected
    assert dev.available_devices()[-1] == "cpu"


def test_cpu_is_always_there():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device(torch.device("cpu")) == torch.device("cpu")
    assert pick_device(" CPU ") == torch.device("cpu")


@pytest.mark.skipif(dev.cuda_count() > 0, reason="this machine has a CUDA GPU")
def test_missing_cuda_is_a_clear_error_not_a_fallback():
    with pytest.raises(DeviceUnavailable) as err:
        pick_device("cuda")
    message = str(err.value)
    assert "'cuda' was asked for" in message
    assert "found: cpu" in message
    assert "device='auto'" in message


def test_gpu_index_out_of_range(monkeypatch):
    monkeypatch.setattr(dev, "cuda_count", lambda: 2)
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    assert pick_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(DeviceUnavailable, match="only 2 CUDA GPU"):
        pick_device("cuda:2")


@pytest.mark.skipif(dev.mps_available(), reason="this machine has MPS")
def test_missing_mps_is_a_clear_error():
    with pytest.raises(DeviceUnavailable, match="Apple-silicon"):
        pick_device("mps")


def test_nonsense_device_name():
    with pytest.raises(ValueError, match="not a device name"):
        pick_device("gpu please")


def test_synchronize_on_cpu_is_a_no_op():
    dev.synchronize("cpu")
    assert dev.describe(torch.device("cpu")) == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(dev.cuda_count() == 0, reason="needs a CUDA GPU")
def test_cuda_device_works_when_present():
    d = pick_device("cuda")
    x = torch.ones(4, device=d)
    dev.synchronize(d)
    assert x.sum().item() == 4
    assert "cuda:0 (" in dev.describe(d)
