"""The docs site builds strictly: a broken link, anchor or API reference fails it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.warm_python import command as python_command


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python",
                        reason="the docs extra (pip install -e '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    guides = ("paper", "risk-measures", "conditioning", "objectives", "environments",
              "continuous", "scaling", "resume", "reports", "search", "security")
    for page in ("index.html", "api/index.html", "reference/config/index.html",
                 "reference/cli/index.html", "reference/run-folder/index.html",
                 "changelog/index.html", "getting-started/index.html", "results/index.html",
                 "extending/index.html", "algorithms/index.html", "algorithms/iqn/index.html",
                 "tutorials/first-agent/index.html", "concepts/utility/index.html",
                 "research/index.html", *(f"guides/{name}/index.html" for name in guides)):
        assert (tmp_path / page).is_file(), page
    # Formulas render offline: KaTeX and its fonts are served by the site itself, and no
    # page asks for a script, a style sheet or a font from elsewhere.
    assert (tmp_path / "javascripts" / "katex" / "katex.min.js").is_file()
    assert list((tmp_path / "javascripts" / "katex" / "fonts").glob("KaTeX_Main-Regular.*"))
    import re
    for html in tmp_path.rglob("*.html"):
        text = html.read_text()
        assert not re.search(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//', text), html
        assert not re.search(r":(?:meth|func|class|mod|attr):`", text), html  # reST leaking
    iqn = (tmp_path / "algorithms" / "iqn" / "index.html").read_text()
    assert 'class="arithmatex"' in iqn and "katex.min.js" in iqn
    config = (tmp_path / "reference" / "config" / "index.html").read_text()
    assert "&lt;run&gt;/seed_&lt;s&gt;/" in config  # a placeholder, not a tag
    assert not (tmp_path / "tables").exists()  # included into pages, not pages of their own
    results = (tmp_path / "results" / "index.html").read_text()
    assert "--8&lt;--" not in results and "RiskyGridWorld-v0" in results  # tables included
    api = (tmp_path / "api" / "index.html").read_text()
    assert "load_agent" in api and "ActionLaws" in api  # the reference from the docstrings
    assert "0.2.0" in (tmp_path / "changelog" / "index.html").read_text()


def shell_commands(page):
    """The commands of a page's ```bash blocks, in order, without their comments, each with
    its block's number; those marked ``# long`` are left out."""
    commands, block, inside = [], 0, False
    for line in page.read_text().splitlines():
        if line.strip().startswith("```"):
            inside = line.strip() == "```bash"
            block += inside
            continue
        code, _, comment = line.partition("  #")
        if inside and code.strip() and not code.strip().startswith("#") and "long" not in comment:
            commands.append((block, code.strip()))
    return commands


def is_quick(command: str) -> bool:
    return "debug=quick" in command or command.startswith("rs-lightning ")


QUICK_PAGES = [page for page in sorted((ROOT / "docs").rglob("*.md"))
               if any(is_quick(command) for _, command in shell_commands(page))]
# An algorithm page's quick command trains its agent for seconds, as tests/test_agents.py
# already does for every agent: in the slow suite, so that the default one stays short.
QUICK_PARAMS = [pytest.param(page, marks=pytest.mark.slow)
                if page.parent.name == "algorithms" and page.name != "index.md" else page
                for page in QUICK_PAGES]


@pytest.mark.parametrize("page", QUICK_PARAMS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_quick_commands_of_a_page_run_and_write_their_files(page, tmp_path):
    """Each command that trains with debug=quick runs into a folder of its own (a run's
    eval.json, a sweep's jobs); a later command of the same block that names a folder by a
    placeholder (``outputs/multirun/<date>_<time>``) gets that folder, and ``rs-lightning
    report`` must write its page. A page that copies a folder of ``examples/`` (``cp -r
    .../examples/<name> ...``) runs its commands in a copy of that folder, as its reader does."""
    import re
    import shlex
    import shutil

    commands = [(b, c) for b, c in shell_commands(page) if is_quick(c)]
    env = dict(os.environ, WANDB_MODE="offline")
    made: dict[int, object] = {}
    python = python_command()
    cwd = ROOT
    copied = [re.search(r"\bcp -r \S*examples/(\w+)", c) for _, c in shell_commands(page)]
    example = next((m.group(1) for m in copied if m), None)
    if example is not None:
        cwd = tmp_path / "project"
        shutil.copytree(ROOT / "examples" / example, cwd,
                        ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    for number, (block, command) in enumerate(commands):
        words = shlex.split(command)
        trains = words[:2] in (["python", "train.py"], ["rs-lightning", "train"])
        if trains:
            sweep = "-m" in words
            folder = tmp_path / f"{'sweep' if sweep else 'run'}_{number}"
            start = ([str(ROOT / "train.py")] if words[0] == "python"
                     else ["-m", "rs_lightning", "train"])
            words = [*python, *start, *words[2:],
                     f"hydra.{'sweep' if sweep else 'run'}.dir={folder}"]
            made[block] = folder
        elif words[0] == "rs-lightning":
            words = [*python, "-m", "rs_lightning.app.console", *words[1:]]
            words = [str(made[block]) if re.search(r"<[^>]+>", w) else w for w in words]
        result = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=600,
                                env=env, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
        args = words[len(python):]
        if trains:
            written = list(made[block].rglob("eval.json"))  # a job's, a member's
            assert written, f"{command}: no eval.json in {made[block]}"
        if args[2:3] == ["report"]:
            assert (made[block] / "report" / "report.html").is_file(), command
