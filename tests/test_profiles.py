"""`torchhw portability` reports why a profile failed, since CI cannot repeat the run."""

from __future__ import annotations

import subprocess

from torchhw.course import profiles


def test_a_failed_profile_shows_the_first_failure_and_keeps_the_whole_output(tmp_path, monkeypatch):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    nb = notebooks / "08_clusters.ipynb"
    nb.write_text("{}")
    out = "\n".join([".F.", "=== FAILURES ===", "___ Cell 13 ___", "RankFailed: rank 1 died (SIGABRT)",
                     "=== short test summary info ===", "FAILED notebooks/08_clusters.ipynb::Cell 13",
                     "1 failed, 2 passed in 3.0s"])
    monkeypatch.setattr(subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 1, stdout=out, stderr="warn"))
    result = profiles.run_profile("1-thread", [nb])
    assert result.status == "failed"
    assert "FAILED notebooks/08_clusters.ipynb::Cell 13" in result.detail
    assert "RankFailed: rank 1 died (SIGABRT)" in result.detail
    kept = tmp_path / "build" / "test-artifacts" / "portability-1-thread.log"
    assert "SIGABRT" in kept.read_text() and "warn" in kept.read_text()
