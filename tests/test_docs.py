"""The docs site builds strictly: a broken link, anchor or API reference fails it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python",
                        reason="the docs extra (pip install -e '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    for page in ("index.html", "api/index.html", "reference/config/index.html",
                 "changelog/index.html", "getting-started/index.html"):
        assert (tmp_path / page).is_file(), page
    api = (tmp_path / "api" / "index.html").read_text()
    assert "load_agent" in api and "ActionLaws" in api  # the reference from the docstrings
    assert "0.2.0" in (tmp_path / "changelog" / "index.html").read_text()
