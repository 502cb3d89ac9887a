"""JupyterLab with the course's settings: opened at notebooks/, no news pop-up.

    torchhw lab                        # open the course in JupyterLab (what `make lab` runs)
    torchhw lab --configure            # only write the settings into this environment
    torchhw lab --configure --server   # ... and open at notebooks/ by default (Binder's postBuild)

The settings are written into this Python environment (``sys.prefix``), never into your home
folder: JupyterLab reads ``{prefix}/share/jupyter/lab/settings/overrides.json`` as defaults that
your own settings still override. :class:`LabServer` starts a private server with a random
token and temporary settings, for tests, and shuts it down leaving no process behind.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from ..distributed import free_port, stop_processes

# The project's JupyterLab settings, by plugin. The news prompt covers the page on first start
# and asks to reach the internet; a reader who wants news can still switch it on.
LAB_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                     "checkForUpdates": False},
}
# Opens the file browser in notebooks/ while the server's root stays the repository, so that
# links such as ../README.md keep working. Only for a server started where notebooks/ exists.
PREFERRED_DIR = "notebooks"


def _merge_json(path: Path, update: dict[str, Any]) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def configure(prefix: str | os.PathLike[str] = sys.prefix, server: bool = False) -> list[Path]:
    """Write the project's Lab settings into the environment at ``prefix``; return the files.

    ``server=True`` also makes every Jupyter server of that environment open at notebooks/:
    right on Binder, where the server always starts at the repository's root, wrong on a
    machine where Lab is started elsewhere (it fails when notebooks/ is missing).
    """
    prefix = Path(prefix)
    overrides = prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    _merge_json(overrides, LAB_SETTINGS)
    written = [overrides]
    if server:
        config = prefix / "etc" / "jupyter" / "jupyter_server_config.json"
        _merge_json(config, {"FileContentsManager": {"preferred_dir": PREFERRED_DIR}})
        written.append(config)
    return written


def lab_argv(root: Path, *extra: str, python: str = sys.executable,
             preferred_dir: bool = True) -> list[str]:
    """The command line that opens JupyterLab at ``root``/notebooks with the project's settings.

    ``preferred_dir=False`` leaves the starting folder to the environment's configuration.
    """
    argv = [python, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    if preferred_dir:
        argv.append(f"--FileContentsManager.preferred_dir={PREFERRED_DIR}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")  # Lab refuses to start as root otherwise (containers, CI)
    return argv + list(extra)


class LabServer:
    """A private JupyterLab on 127.0.0.1: random port and token, settings in ``scratch``.

        with LabServer(root, scratch) as lab:
            page.goto(lab.url("lab/tree/notebooks/00_hardware_tour.ipynb?reset"))
    """

    def __init__(self, root: Path, scratch: Path, settings: dict[str, dict[str, Any]] | None = None,
                 extra: Sequence[str] = (), startup_timeout: float = 60,
                 python: str = sys.executable, preferred_dir: bool = True) -> None:
        self.root, self.scratch = Path(root), Path(scratch)
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.settings = {**LAB_SETTINGS, **(settings or {})}
        self.extra, self.startup_timeout = list(extra), startup_timeout
        self.python = python  # the environment whose Lab, kernels and settings are used
        self.preferred_dir = preferred_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.scratch / "lab.log"

    def url(self, path: str = "") -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}{sep}token={self.token}"

    def start(self) -> "LabServer":
        settings, workspaces = self.scratch / "settings", self.scratch / "workspaces"
        for plugin, values in self.settings.items():
            package, name = plugin.rsplit(":", 1)
            path = settings / package / f"{name}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        workspaces.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(self.scratch / "config"),
               "JUPYTER_RUNTIME_DIR": str(self.scratch / "runtime"), "JUPYTER_PLATFORM_DIRS": "1"}
        argv = lab_argv(self.root, "--no-browser", "--ServerApp.ip=127.0.0.1",
                        f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                        f"--IdentityProvider.token={self.token}",
                        f"--LabApp.user_settings_dir={settings}",
                        f"--LabApp.workspaces_dir={workspaces}", *self.extra, python=self.python,
                        preferred_dir=self.preferred_dir)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.proc.returncode} while "
                                   f"starting; its log:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {self.startup_timeout:.0f} s; "
                           f"its log:\n{self.log.read_text()[-3000:]}")

    def stop(self, timeout: float = 15) -> None:
        """Shut down through the API (kernels too), then kill whatever is left; verify."""
        import psutil

        if self.proc is None:
            return
        try:
            family = [psutil.Process(self.proc.pid)]
            family += family[0].children(recursive=True)  # the kernels
        except psutil.NoSuchProcess:
            family = []
        try:
            request = urllib.request.Request(self.url("api/shutdown"), method="POST")
            urllib.request.urlopen(request, timeout=5).close()
        except OSError:
            pass  # already gone, or not answering: the kill below handles it
        _, alive = psutil.wait_procs(family, timeout=timeout)
        stop_processes(alive, grace=5)  # what did not shut down: SIGTERM, then SIGKILL
        _, alive = psutil.wait_procs(alive, timeout=0.1)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything that changed its parent
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(timeout=5)
        self.proc = None
        if alive:
            raise RuntimeError(f"processes left after stopping JupyterLab: "
                               f"{[p.pid for p in alive]}")

    def __enter__(self) -> "LabServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: Sequence[str] = (), root: Path | None = None, configure_only: bool = False,
         server: bool = False) -> int:
    """``torchhw lab``: write the settings into this environment, then start Lab at notebooks/."""
    for path in configure(sys.prefix, server=server):
        print(f"torchhw lab: settings in {path}")
    if configure_only:
        return 0
    root = (root or Path.cwd()).resolve()
    if not (root / PREFERRED_DIR).is_dir():
        print(f"torchhw lab: error: {root} has no {PREFERRED_DIR}/ folder; run this from the "
              f"course's checkout", file=sys.stderr)
        return 2
    return subprocess.call(lab_argv(root, *argv))
