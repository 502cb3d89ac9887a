"""Bad papermill parameters fail in the validation cell with a message that says what to do."""

import papermill
import pytest
from papermill.exceptions import PapermillExecutionError

from torchhw.device import cuda_count

from conftest import NOTEBOOKS

VALIDATION_CELL = 3  # execution count: setup, parameters, (injected parameters), validation


def run(tmp_path, name, **parameters):
    with pytest.raises(PapermillExecutionError) as err:
        papermill.execute_notebook(str(NOTEBOOKS / name), str(tmp_path / name),
                                   parameters=parameters, kernel_name="python3",
                                   progress_bar=False, cwd=str(NOTEBOOKS),
                                   execution_timeout=120)
    return err.value


@pytest.mark.skipif(cuda_count() > 0, reason="this machine has a CUDA GPU")
def test_asking_for_cuda_on_a_cpu_machine(tmp_path):
    err = run(tmp_path, "00_hardware_tour.ipynb", device="cuda")
    assert err.ename == "DeviceUnavailable"
    assert "'cuda' was asked for" in err.evalue and "device='auto'" in err.evalue
    assert err.exec_count == VALIDATION_CELL + 1  # +1: papermill's injected cell


def test_quick_maybe_names_quick_and_the_type(tmp_path):
    err = run(tmp_path, "01_tensors.ipynb", quick="maybe")
    assert err.ename == "ParameterError"
    assert "'quick' = 'maybe'" in err.evalue and "True or False" in err.evalue


def test_typo_in_a_parameter_name_is_reported(tmp_path):
    err = run(tmp_path, "01_tensors.ipynb", sed=3)
    assert err.ename == "ParameterError"
    assert "unknown parameter 'sed'" in err.evalue and "did you mean 'seed'" in err.evalue
