"""`make lab`'s command line, and a private Lab server that starts, answers and leaves nothing."""

from __future__ import annotations

import json
import sys
import urllib.request

import psutil

from torchhw.course.lab import LabServer, lab_argv


def test_lab_opens_at_notebooks_under_the_repository(tmp_path):
    argv = lab_argv(tmp_path, "--port=9999")
    assert argv[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={tmp_path}" in argv
    assert "--FileContentsManager.preferred_dir=notebooks" in argv and argv[-1] == "--port=9999"


def test_private_server_has_the_settings_and_leaves_no_process(tmp_path):
    (tmp_path / "root" / "notebooks").mkdir(parents=True)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with LabServer(tmp_path / "root", tmp_path / "scratch") as lab:
        assert lab.token and str(lab.port) in lab.url()
        plugin = "@jupyterlab/apputils-extension:notification"
        with urllib.request.urlopen(lab.url(f"lab/api/settings/{plugin}")) as reply:
            assert json.loads(reply.read())["settings"]["fetchNews"] == "false"
        try:  # no token, no entry
            urllib.request.urlopen(f"http://127.0.0.1:{lab.port}/api/contents")
            raise AssertionError("the server answered without its token")
        except urllib.error.HTTPError as err:
            assert err.code == 403
        pid = lab.proc.pid
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"processes left behind: {left}"
