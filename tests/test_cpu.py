"""The CPU budget: cgroup v1 and v2 quota files, parsed from fake cgroup trees."""

import os

import pytest

from torchhw.cpu import CpuBudget, cgroup_quota, cpu_budget, parse_cfs, parse_cpu_max


@pytest.mark.parametrize("text, cpus", [("max 100000\n", None), ("200000 100000\n", 2.0),
                                        ("150000 100000", 1.5), ("50000 100000", 0.5),
                                        ("max", None), ("300000", 3.0)])
def test_parse_cpu_max(text, cpus):
    assert parse_cpu_max(text) == cpus


def test_parse_cfs():
    assert parse_cfs("-1\n", "100000\n") is None
    assert parse_cfs("250000", "100000") == 2.5


def test_v2_is_read_before_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota(tmp_path) == (2.0, str(tmp_path / "cpu.max"))


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
def test_v1(tmp_path, folder):
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / folder / "cpu.cfs_period_us").write_text("100000\n")
    quota, source = cgroup_quota(tmp_path)
    assert quota is None and source.endswith("cpu.cfs_quota_us")


def test_no_cgroup_files(tmp_path):
    quota, reason = cgroup_quota(tmp_path)
    assert quota is None and "no cgroup CPU files" in reason


@pytest.mark.parametrize("affinity, quota, usable", [(8, None, 8), (8, 2.0, 2), (8, 1.5, 1),
                                                     (8, 0.5, 1), (2, 16.0, 2)])
def test_usable_is_affinity_capped_by_quota(affinity, quota, usable):
    assert CpuBudget(64, affinity, quota, "test").usable == usable


def test_this_machine(tmp_path):
    budget = cpu_budget(tmp_path)
    assert budget.logical == os.cpu_count() and 1 <= budget.affinity <= budget.logical
    assert budget.quota is None and budget.usable == budget.affinity
