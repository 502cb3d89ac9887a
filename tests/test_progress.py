"""Progress bars: for a person at a terminal, never in CI logs or committed outputs."""

import sys

import pytest

from torchhw.course.runner import progress_wanted


class Tty:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("env, tty, wanted", [
    ({}, True, True),
    ({}, False, False),                      # piped into a log
    ({"TQDM_DISABLE": "1"}, True, False),    # the Makefile's test and notebooks targets
    ({"CI": "true"}, True, False),           # CI
    ({"TQDM_DISABLE": "0"}, True, True),
])
def test_progress_only_for_a_person_at_a_terminal(monkeypatch, env, tty, wanted):
    for name in ("TQDM_DISABLE", "CI"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stderr", Tty(tty))
    assert progress_wanted() is wanted

