"""The docs pages' sources, checked without building the site: every link and every cited
path of the repository exists, no raw HTML or reStructuredText role leaks into a page, and
the lists of agents, risk measures, objectives and environments on Home, Get started and
the Algorithms section name every one the registries and conf/ have (a new agent appears
everywhere, or a test here fails)."""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import re
from pathlib import Path

import pytest

from tests.conftest import CONF, ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
# A path of the repository cited in a page's text, a code span or a code block: the top
# folders and files a reader can open. Placeholders (<run>, *, {a,b}) are not paths.
CITED = re.compile(r"(?<![\w./-])((?:src|conf|tests|docs|examples|benchmarks|scripts)/"
                   r"[\w./-]*\.(?:py|md|yaml|yml|sh|json|toml|txt|png|csv))(?![\w*<{])")
# A module of the package cited from inside it (`agents/dqn.py`, `rs_lightning/risk/static.py`).
PACKAGE_CITED = re.compile(r"`(?:rs_lightning/)?((?:agents|risk|objectives|envs|engine|references|"
                           r"analysis|app|config)/[\w/]+\.py)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
TAG = re.compile(r"</?([A-Za-z][\w-]*)(\s[^>]*)?/?>")
ROLE = re.compile(r":(?:py:)?(?:meth|func|class|mod|attr|obj|ref|doc|data|exc):`")


def prose(page_text: str) -> list[tuple[int, str]]:
    """(line number, text) of a page outside its code blocks, code spans (which may run
    over a line break) and formulas."""
    kept, inside = [], False
    for line in page_text.splitlines():
        fence = line.strip().startswith("```")
        inside = inside != fence
        kept.append("" if inside or fence else line)
    text = "\n".join(kept)

    def blank(match):
        return "\n" * match.group(0).count("\n")
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", blank, re.sub(r"`[^`]*`", blank, text),
                  flags=re.S)
    return [(number, line) for number, line in enumerate(text.split("\n"), 1) if line]


def leaks(page_text: str) -> list[str]:
    """Raw HTML tags and reST roles (``:meth:`x```) in a page's text: Markdown shows a tag
    as nothing (``<run>`` vanishes, ``<s>`` strikes through) and a role as itself."""
    found = [f"line {number}: {m.group(0)}" for number, text in prose(page_text)
             for m in TAG.finditer(text)]
    lines = page_text.splitlines()
    for number, _ in prose(page_text):  # a role is a word before a code span
        found += [f"line {number}: {m.group(0)}" for m in ROLE.finditer(lines[number - 1])]
    return found


def missing_targets(page: Path, page_text: str | None = None) -> list[str]:
    """The page's relative links whose file does not exist, and the repository paths it
    cites (``src/...``, ``conf/...``, ``docs/...``) that do not exist."""
    text = page.read_text() if page_text is None else page_text
    missing = []
    for target in LINK.findall(text):
        path = target.split("#", 1)[0]
        if not path or re.match(r"[a-z]+:", path):  # an anchor of the page, a URL
            continue
        if not (page.parent / path).exists():
            missing.append(target)
    missing += [cited for cited in CITED.findall(text) if not (ROOT / cited).exists()]
    package = ROOT / "src" / "rs_lightning"
    missing += [cited for cited in PACKAGE_CITED.findall(text) if not (package / cited).exists()]
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_page_links_and_cites_only_what_exists(page):
    assert not missing_targets(page), missing_targets(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_raw_html_or_rest_role_leaks_into_a_page(page):
    assert not leaks(page.read_text())


def test_the_checks_catch_a_dead_link_a_missing_path_a_tag_and_a_role():
    page = DOCS / "index.md"
    assert missing_targets(page, "[a](guides/nowhere.md) and `src/rs_lightning/nowhere.py`") == [
        "guides/nowhere.md", "src/rs_lightning/nowhere.py"]
    assert missing_targets(page, "see `agents/nowhere.py`") == ["agents/nowhere.py"]
    assert missing_targets(page, "[a](getting-started.md#install), `conf/train.yaml`, "
                                 "`agents/dqn.py`, `rs_lightning/risk/static.py`, "
                                 "`outputs/<run>/x.json`, [b](https://example.org)") == []
    assert leaks("outputs in <run>/seed_<s>/") == ["line 1: <run>", "line 1: <s>"]
    assert leaks("see :meth:`act`") == ["line 1: :meth:`"]
    assert leaks("`<run>/seed_<s>/` in code\n```bash\necho <x>\n```\n$a < b > c$") == []


def documented_objects() -> list[object]:
    """The objects the API pages render from their docstrings (``::: dotted.path``), with
    their public members."""
    objects = []
    for page in PAGES:
        for dotted in re.findall(r"^::: ([\w.]+)", page.read_text(), flags=re.M):
            module, _, name = dotted.rpartition(".")
            obj = getattr(importlib.import_module(module), name)
            objects.append(obj)
            if inspect.isclass(obj):
                objects += [member for key, member in vars(obj).items()
                            if not key.startswith("_") and getattr(member, "__doc__", None)]
    return objects


def test_the_docstrings_the_api_page_renders_hold_no_rest_role():
    objects = documented_objects()
    assert objects  # the API page renders some
    roles = {getattr(o, "__qualname__", repr(o)): ROLE.findall(inspect.getdoc(o) or "")
             for o in objects}
    assert not {name: found for name, found in roles.items() if found}


# ---- the lists that cannot go stale --------------------------------------------------

def registered() -> dict[str, list[str]]:
    """{the config key: every option} from the registries and conf/: what the lists on
    the pages must name."""
    from rs_lightning.agents import AGENTS
    from rs_lightning.config.schema import selectable_objectives
    from rs_lightning.risk import RISK_MEASURES

    return {"agent": sorted(AGENTS), "risk": sorted(RISK_MEASURES),
            "objective": sorted(selectable_objectives()),
            "env": sorted(p.stem for p in (CONF / "env").glob("*.yaml"))}


def test_the_registries_and_conf_name_the_same_options():
    options = registered()
    assert options["agent"] == sorted(p.stem for p in (CONF / "agent").glob("*.yaml"))
    assert options["risk"] == sorted(p.stem for p in (CONF / "risk").glob("*.yaml"))


def row(page_text: str, key: str) -> str:
    """The table row of a page whose first cell is ``key`` in a code span."""
    rows = [line for line in page_text.splitlines() if line.startswith(f"| `{key}` |")]
    assert rows, f"no row for `{key}`"
    return rows[0]


def unlisted(page_text: str, key: str, options: list[str]) -> list[str]:
    """The options the page's row for ``key`` does not name (a code span ``name``, or a
    pattern such as ``minatar_*`` that matches it)."""
    named = re.findall(r"`([^`]+)`", row(page_text, key).split("|", 2)[2])
    return [o for o in options if not any(fnmatch.fnmatchcase(o, n) for n in named)]


LIST_PAGES = ("index.md", "getting-started.md")


@pytest.mark.parametrize("page", LIST_PAGES)
@pytest.mark.parametrize("key", ["agent", "risk", "objective", "env"])
def test_the_lists_on_home_and_get_started_name_every_option(page, key):
    assert not unlisted((DOCS / page).read_text(), key, registered()[key])


GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")


@pytest.mark.parametrize("group", GROUPS)
def test_get_started_names_every_option_of_every_config_group(group):
    options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    assert not unlisted((DOCS / "getting-started.md").read_text(), group, options)


def test_a_new_option_missing_from_a_list_fails():
    text = (DOCS / "getting-started.md").read_text()
    assert unlisted(text, "agent", [*registered()["agent"], "my_new_agent"]) == ["my_new_agent"]
    assert unlisted(text, "env", ["minatar_pong"]) == []  # `minatar_*` names it


def nav_pages() -> list[str]:
    import yaml

    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # !!python/name tags
    return list(walk(yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)["nav"]))


def pageless_agents(agents: list[str]) -> list[str]:
    """The agents without an Algorithms page in the nav, or whose page the Algorithms
    index does not link."""
    index = (DOCS / "algorithms" / "index.md").read_text()
    nav = nav_pages()
    return [a for a in agents if f"algorithms/{a}.md" not in nav or f"({a}.md)" not in index]


def test_every_agent_has_an_algorithm_page_on_the_one_template():
    agents = registered()["agent"]
    assert not pageless_agents(agents)
    assert pageless_agents([*agents, "my_new_agent"]) == ["my_new_agent"]
    template = ["## Overview", "## Key equations", "## Config keys", "## Usage", "## Results",
                "## Differences from the original paper"]
    for agent in agents:
        text = (DOCS / "algorithms" / f"{agent}.md").read_text()
        headings = [line for line in text.splitlines() if line.startswith("## ")]
        assert headings == template, (agent, headings)
        assert f'--8<-- "conf/agent/{agent}.yaml"' in text  # its keys, from conf/ itself
