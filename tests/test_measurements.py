import json

import numpy as np
import pytest
import torch

from torchhw import measurements as rec


def test_record_keeps_values_in_memory_without_the_env_var(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(rec.ENV_VAR, raising=False)
    rec.add("speed", torch.tensor(2.5), unit="x")
    assert rec.collected()["speed"] == {"value": 2.5, "unit": "x", "note": ""}
    assert list(tmp_path.iterdir()) == []


def test_record_writes_the_runners_file(monkeypatch, tmp_path):
    target = tmp_path / "records.json"
    monkeypatch.setenv(rec.ENV_VAR, str(target))
    rec.add("a", np.float32(1.5), "GB/s", "note")
    rec.add("b", [1, (2, 3)])
    rec.add("a", 2)  # replaces
    data = json.loads(target.read_text())
    assert data["a"]["value"] == 2 and data["b"]["value"] == [1, [2, 3]]
    assert rec.load(target) == data
    assert not list(tmp_path.glob("*.tmp"))


def test_record_refuses_what_json_cannot_hold(monkeypatch):
    monkeypatch.delenv(rec.ENV_VAR, raising=False)
    with pytest.raises(TypeError, match="measurements.add\\(\\) takes"):
        rec.add("bad", object())
    rec.add("inf", float("inf"))
    assert rec.collected()["inf"]["value"] == "inf"


def test_load_of_a_missing_file_is_empty(tmp_path):
    assert rec.load(tmp_path / "none.json") == {}
