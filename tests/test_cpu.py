"""The CPU budget: cgroup v1 and v2 quota files, parsed from fake cgroup trees."""

import os

import pytest

from torchhw.cpu import (CpuBudget, cgroup_levels, cgroup_quota, cpu_budget, own_cgroups,
                         parse_cfs, parse_cpu_max)


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


def tree(root, files, cgroup="0::/\n"):
    """A fake cgroup tree under ``root``: {relative file: text}, and a fake /proc/self/cgroup."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "proc_self_cgroup").write_text(cgroup)
    return root / "proc_self_cgroup"


def test_own_cgroups_reads_the_v2_line_and_v1_cpu_line():
    text = ("12:memory:/job_7\n4:cpu,cpuacct:/slurm/uid_1/job_7\n2:cpuset:/x\n"
            "1:name=systemd:/user.slice\n0::/user.slice/session-3.scope\n")
    assert own_cgroups(text) == {"v1": "/slurm/uid_1/job_7", "v2": "/user.slice/session-3.scope"}
    assert own_cgroups("0::/\n") == {"v2": "/"} and own_cgroups("") == {}


def test_levels_run_from_the_own_folder_up_to_the_root(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert cgroup_levels(tmp_path, "/a/b") == [tmp_path / "a" / "b", tmp_path / "a", tmp_path]
    # a folder that is not mounted here (a container's view of the host's path) is left out
    assert cgroup_levels(tmp_path, "/docker/abc") == [tmp_path]
    assert cgroup_levels(tmp_path, "/") == [tmp_path]


def test_v2_limit_of_a_parent_applies(tmp_path):
    # a Slurm-like job: no limit of its own, 2 CPUs on the parent; cgroup v2's root has no cpu.max
    proc = tree(tmp_path, {"jobs/cpu.max": "200000 100000\n", "jobs/job_42/cpu.max": "max 100000\n"},
                "0::/jobs/job_42\n")
    assert cgroup_quota(tmp_path, proc) == (2.0, str(tmp_path / "jobs" / "cpu.max"))
    assert cpu_budget(tmp_path, proc).quota == 2.0


def test_v2_the_smallest_limit_wins(tmp_path):
    proc = tree(tmp_path, {"a/cpu.max": "400000 100000", "a/b/cpu.max": "150000 100000",
                           "a/b/c/cpu.max": "max 100000"}, "0::/a/b/c\n")
    assert cgroup_quota(tmp_path, proc) == (1.5, str(tmp_path / "a" / "b" / "cpu.max"))


def test_v2_no_limit_anywhere_names_the_own_file(tmp_path):
    proc = tree(tmp_path, {"a/cpu.max": "max 100000", "a/b/cpu.max": "max 100000"}, "0::/a/b\n")
    assert cgroup_quota(tmp_path, proc) == (None, str(tmp_path / "a" / "b" / "cpu.max"))


def test_v2_root_is_the_containers_own_cgroup(tmp_path):
    # a container that shares the host's cgroup namespace: the host's path is not mounted
    proc = tree(tmp_path, {"cpu.max": "100000 100000\n"}, "0::/system.slice/docker-1.scope\n")
    assert cgroup_quota(tmp_path, proc) == (1.0, str(tmp_path / "cpu.max"))


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
def test_v1_limit_of_a_parent_applies(tmp_path, folder):
    proc = tree(tmp_path, {f"{folder}/cpu.cfs_quota_us": "-1\n",
                           f"{folder}/cpu.cfs_period_us": "100000\n",
                           f"{folder}/slurm/cpu.cfs_quota_us": "300000\n",
                           f"{folder}/slurm/cpu.cfs_period_us": "100000\n",
                           f"{folder}/slurm/job_7/cpu.cfs_quota_us": "-1\n",
                           f"{folder}/slurm/job_7/cpu.cfs_period_us": "100000\n"},
                "4:cpu,cpuacct:/slurm/job_7\n0::/\n")
    assert cgroup_quota(tmp_path, proc) == (3.0, str(tmp_path / folder / "slurm" / "cpu.cfs_quota_us"))


def test_this_machine(tmp_path):
    budget = cpu_budget(tmp_path)
    assert budget.logical == os.cpu_count() and 1 <= budget.affinity <= budget.logical
    assert budget.quota is None and budget.usable == budget.affinity
