"""The feedback of notebooks 03 and 04's exercises for the mistakes readers actually make."""

from torchhw.exercises import nn as ex_nn
from torchhw.exercises import optim as ex_optim


def test_conv_out_with_padding_and_stride_swapped_says_so():
    swapped = lambda size, kernel, stride=1, padding=0: (size + 2 * stride - kernel) // padding + 1
    feedback = ex_nn.check_2(swapped)
    assert feedback.status == "wrong"
    assert "padding was used as the stride" in feedback.message
    assert "raised ZeroDivisionError" not in feedback.message


def test_conv_out_with_other_argument_names_is_told_conv2d_order():
    feedback = ex_nn.check_2(lambda n, k, s=1, p=0: (n + 2 * p - k) // s + 1)
    assert feedback.status == "wrong" and "stride=1, padding=0" in feedback.message


def test_a_plain_list_of_layers_is_explained():
    feedback = ex_nn.check_4(ex_nn.WRONG[4][0])
    assert feedback.status == "wrong" and "Python lists hide" in feedback.message
