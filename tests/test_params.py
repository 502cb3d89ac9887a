import math
import os

import pytest

from torchhw.params import ParameterError, candidates, check_params, float_range, int_range, one_of


def ns(**values):
    # what a notebook's globals hold when its validation cell runs
    return {"In": [], "Out": {}, "get_ipython": print, "sys": os, "_": None, **values}


def test_valid_parameters_pass_and_are_returned():
    space = ns(device="auto", quick=True, seed=3, lr=1)
    got = check_params(space, device=str, quick=bool, seed=int_range(0, 10), lr=float_range(0, 1))
    assert got == {"device": "auto", "quick": True, "seed": 3, "lr": 1.0}
    assert isinstance(space["lr"], float)  # the int was converted in the namespace too


def test_wrong_type_names_parameter_value_and_expectation():
    with pytest.raises(ParameterError) as err:
        check_params(ns(quick="maybe"), quick=bool)
    message = str(err.value)
    assert "'quick'" in message and "'maybe'" in message and "(str)" in message
    assert "True or False" in message and "-p quick" in message


def test_bool_is_not_an_int_and_float_is_not_an_int():
    with pytest.raises(ParameterError, match="expected an int"):
        check_params(ns(seed=True), seed=int)
    with pytest.raises(ParameterError, match="expected an int"):
        check_params(ns(seed=1.5), seed=int)


def test_ranges_and_choices():
    with pytest.raises(ParameterError, match="from 0 to 10"):
        check_params(ns(seed=11), seed=int_range(0, 10))
    with pytest.raises(ParameterError, match="at least 1"):
        check_params(ns(epochs=0), epochs=int_range(1))
    with pytest.raises(ParameterError, match="one of 'sgd', 'adam'"):
        check_params(ns(opt="adm"), opt=one_of("sgd", "adam"))
    assert check_params(ns(opt="adam"), opt=one_of("sgd", "adam")) == {"opt": "adam"}
    with pytest.raises(ParameterError):
        check_params(ns(lr=math.nan), lr=float_range(0, 1))


def test_unknown_parameter_is_an_error_with_a_suggestion():
    with pytest.raises(ParameterError) as err:
        check_params(ns(epochs=3, epocs=3), epochs=int)
    message = str(err.value)
    assert "unknown parameter 'epocs'" in message and "did you mean 'epochs'" in message


def test_missing_declared_parameter():
    with pytest.raises(ParameterError, match="not set"):
        check_params(ns(), seed=int)


def test_modules_functions_private_and_ipython_names_are_not_parameters():
    space = ns(quick=True, helper=lambda: 1, _hidden=3, torch=os)
    assert candidates(space) == {"quick"}


def test_a_rule_must_be_a_type_or_spec():
    with pytest.raises(TypeError):
        check_params(ns(x=1), x="int")
