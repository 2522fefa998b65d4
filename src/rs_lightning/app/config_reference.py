"""The config reference, generated: every key of ``conf/`` with its default, its type, the
values the schema accepts and what it means, as one Markdown page.

    rs-lightning config-reference            # writes docs/reference/config.md
    rs-lightning config-reference --check    # exit 1 if that page is stale

Nothing on the page is written by hand. The meaning of a key is its comment in the YAML
(the comment lines just above it and the one after its value); the default and its type
are the YAML's value (a null default's type is the one the schema's dataclasses declare:
``number or null``); the accepted values are what the checks of
:mod:`rs_lightning.config.schema` say when they refuse a value (the text of their
``_require`` and ``_at_most`` calls, read from the source), so the page and the errors use
the same words. ``tests/test_config_reference.py`` fails when the page is stale.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from rs_lightning.config import CONF_DIR, schema

# The page, in the repository's checkout (the folder the command runs in).
PAGE = Path("docs") / "reference" / "config.md"
# Hydra's own section: its keys are Hydra's (hydra.cc documents them).
SKIPPED_SECTIONS = ("hydra", "defaults")


@dataclass(frozen=True)
class Key:
    path: str  # dotted, e.g. learning.lr
    default: str  # as the YAML writes it
    kind: str  # integer, number, true/false, text, list, null, section
    meaning: str


def yaml_keys(path: Path, prefix: str = "") -> list[Key]:
    """The keys of one YAML file in order, with their comments (a key's comment lines just
    above it, then the comment after its value) and their defaults."""
    lines = path.read_text().splitlines()
    values = yaml.safe_load(path.read_text()) or {}
    keys: list[Key] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing sections
    pending: list[str] = []  # comment lines waiting for the key below them
    inline_column = None  # where the last key's comment after its value began
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            column = len(line) - len(line.lstrip())
            if stripped.startswith("#") and inline_column is not None and column >= inline_column:
                # The comment after the last key's value goes on, under itself.
                last = keys[-1]
                keys[-1] = Key(last.path, last.default, last.kind, f"{last.meaning} {text}")
            elif stripped.startswith("#") and not text.startswith("@package"):
                pending.append(text)
                inline_column = None
            elif not stripped:
                pending = []
                inline_column = None
            continue
        inline_column = None
        if stripped.startswith("- ") or ":" not in stripped:
            pending = []
            continue
        indent = len(line) - len(line.lstrip())
        name = stripped.split(":", 1)[0].strip().strip("'\"")
        if not name or " " in name:
            pending = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([*(k for _, k in stack), name])
        rest = stripped.split(":", 1)[1]
        value_text, _, inline = rest.partition(" #")
        comment = " ".join([*pending, inline.strip()]).strip()
        pending = []
        value = _lookup(values, dotted)
        if value_text.strip() == "" and isinstance(value, dict):
            stack.append((indent, name))
            if dotted.split(".")[0] not in SKIPPED_SECTIONS:
                keys.append(Key(prefix + dotted, "", "section", comment))
            continue
        if dotted.split(".")[0] in SKIPPED_SECTIONS:
            continue
        kind = _kind(value) if value is not None else _null_kind(prefix + dotted)
        keys.append(Key(prefix + dotted, _shown(value), kind, comment))
        if inline.strip():
            inline_column = line.index(" #") + 1
    return keys


def _lookup(values, dotted: str):
    node = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


# The page's word for each type, of a YAML value and of a schema annotation alike (bool
# before int: a bool is an int).
KIND_WORDS = {bool: "true/false", int: "integer", float: "number", str: "text", list: "list",
              dict: "mapping"}


def _kind(value) -> str:
    if value is None:
        return "null"
    return next((word for kind, word in KIND_WORDS.items() if isinstance(value, kind)), "text")


def _annotation(path: str):
    """The type the schema declares for a dotted key (``learning.lr``, ``agent.kappa``):
    the dataclass fields of :class:`~rs_lightning.config.schema.TrainConfig`; under
    ``agent.``, those of any registered agent's config class, and under
    ``risk_conditioning.`` those of its own class (the schema types both sections as
    mappings); None where none is declared."""
    import dataclasses
    import typing

    from rs_lightning.agents import AGENTS
    from rs_lightning.risk.conditioning import RiskConditioning

    def walk(cls, parts):
        if not (parts and dataclasses.is_dataclass(cls)):
            return None
        hint = typing.get_type_hints(cls).get(parts[0])
        return hint if len(parts) == 1 or hint is None else walk(hint, parts[1:])

    head, *rest = path.split(".")
    if head == "agent" and rest:
        hints = (walk(config_class, rest) for _, config_class in AGENTS.values())
        return next((hint for hint in hints if hint is not None), None)
    if head == "risk_conditioning":
        return walk(RiskConditioning, rest)
    return walk(schema.TrainConfig, [head, *rest])


def _null_kind(path: str) -> str:
    """The type of a key whose default is null: what the schema declares besides None
    (``number or null`` for ``Optional[float]``), else ``null``."""
    import typing

    hint = _annotation(path)
    kinds = [KIND_WORDS.get(typing.get_origin(arg) or arg) for arg in typing.get_args(hint)
             if arg is not type(None)]
    if not kinds or None in kinds:
        return "null"
    return " or ".join(dict.fromkeys(kinds)) + " or null"


def _shown(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return str(value)


def accepted_values() -> dict[str, list[str]]:
    """{key: what the schema's checks say it must be}, from the string arguments of its
    ``_require`` and ``_at_most`` calls (keys built in a loop over a tuple of names are
    expanded; the words are those of the errors)."""
    tree = ast.parse(inspect.getsource(schema))
    found: dict[str, list[str]] = {}

    def text(node, names: dict[str, str]) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif (isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name)
                      and value.value.id in names):
                    parts.append(names[value.value.id])
                elif isinstance(value, ast.FormattedValue) and constant(value.value) is not None:
                    parts.append(str(constant(value.value)))  # one of the schema's constants
                else:
                    parts.append("…")
            # A parenthesis that quotes the refused config's own numbers says nothing here.
            return re.sub(r"\s*\([^()]*…[^()]*\)", "", "".join(parts))
        return None

    def visit(node, names: dict[str, str]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(
                node.iter, (ast.Tuple, ast.List)):
            for element in node.iter.elts:
                if isinstance(element, ast.Constant) and isinstance(element.value, str):
                    for child in node.body:
                        visit(child, {**names, node.target.id: element.value})
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "_require" and len(node.args) >= 3:
                key, allowed = text(node.args[1], names), text(node.args[2], names)
            elif node.func.id == "_one_of" and len(node.args) >= 3:
                key, options = text(node.args[0], names), constant(node.args[2])
                allowed = None if options is None else "one of " + ", ".join(map(str, options))
            elif node.func.id == "_at_most" and len(node.args) >= 4:
                key, limit = text(node.args[0], names), constant(node.args[2])
                why = text(node.args[3], names)
                allowed = (f"at most {'a limit' if limit is None else limit}"
                           + (f" ({why})" if why else ""))
            else:
                key = allowed = None
            if key and allowed and "…" not in key:
                found.setdefault(key, [])
                if allowed not in found[key]:
                    found[key].append(allowed)
        for child in ast.iter_child_nodes(node):
            visit(child, names)

    def constant(node):
        """The value of an expression of the schema's own constants (a tuple of names, a
        limit), or None where it depends on the config being checked."""
        try:
            return eval(compile(ast.Expression(node), "schema", "eval"), vars(schema))  # noqa: S307 (our own source)
        except Exception:  # noqa: BLE001 (self.<key> and the like: not a constant)
            return None

    visit(tree, {})
    return found


def _prose(text: str) -> str:
    """A YAML comment as Markdown text: ``<`` and ``>`` outside code spans escaped, so that
    a placeholder such as ``<run>/seed_<s>/`` reads as written rather than as an HTML tag."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # the even parts lie outside `code` spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    return _prose(text).replace("|", "\\|").replace("\n", " ")


def _table(keys: list[Key], accepted: dict[str, list[str]]) -> list[str]:
    keys = [key for key in keys if key.kind != "section"]
    # A table whose keys take any value of their type has no accepted column: an empty
    # column would narrow the meanings.
    checked = any(accepted.get(key.path) for key in keys)
    rows = (["| key | default | type | accepted | meaning |", "|---|---|---|---|---|"] if checked
            else ["| key | default | type | meaning |", "|---|---|---|---|"])
    for key in keys:
        name = key.path
        allowed = "; ".join(accepted.get(name, []))
        default = key.default.replace("|", "\\|")  # inside a code span: no escapes
        rows.append(f"| `{name}` | `{default}` | {key.kind} | "
                    + (f"{_cell(allowed)} | " if checked else "") + f"{_cell(key.meaning)} |")
    return rows


def render() -> str:
    """The whole page."""
    accepted = accepted_values()
    main = yaml_keys(CONF_DIR / "train.yaml")
    out = ["# Configuration reference", "",
           "Generated from `conf/` and the checks of `src/rs_lightning/config/schema.py` by "
           "`rs-lightning config-reference`; do not edit it by hand "
           "(`tests/test_config_reference.py` fails when it is stale). Any key is set on the "
           "command line as `key=value` (`python train.py learning.lr=3e-4`), a group's option "
           "as `group=option` (`python train.py agent=c51`). *Accepted* gives the words of "
           "the error a refused value gets; a key without them takes any value of its type.",
           ""]
    sections: dict[str, list[Key]] = {}
    for key in main:
        top = key.path.split(".")[0]
        sections.setdefault(top if "." in key.path or key.kind == "section" else "", []).append(key)
    out += ["## Top-level keys (`conf/train.yaml`)", "",
            *_table(sections.pop("", []), accepted), ""]
    for section, keys in sections.items():
        heading = next((k for k in keys if k.path == section and k.kind == "section"), None)
        out += [f"### `{section}`", ""]
        if heading is not None and heading.meaning:
            out += [_prose(heading.meaning), ""]
        out += [*_table(keys, accepted), ""]
    for group in sorted(p for p in CONF_DIR.iterdir()
                        if p.is_dir() and p.name not in ("hydra", "__pycache__")):
        options = sorted(group.rglob("*.yaml"))  # experiment_agent: <experiment>/<agent>.yaml
        if not options:
            continue
        out += [f"## The `{group.name}` group (`{group.name}=<option>`)", ""]
        for option in options:
            keys = yaml_keys(option, "" if _is_global(option) else f"{group.name}.")
            first = _first_comment(option)
            name = option.relative_to(group).with_suffix("").as_posix()
            out += [f"### `{group.name}={name}`", ""]
            if first:
                out += [_prose(first), ""]
            if any(k.kind != "section" for k in keys) and not _is_global(option):
                out += [*_table(keys, accepted), ""]
            elif any(k.kind != "section" for k in keys):
                out += ["Sets these keys:", "", *_table(keys, accepted), ""]
    return "\n".join(out).rstrip() + "\n"


def _is_global(path: Path) -> bool:
    return "@package _global_" in path.read_text().split("\n", 3)[0]


def _first_comment(path: Path) -> str:
    """The file's opening comment (its first comment lines), as one paragraph."""
    lines = []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# @package"):
            continue
        if not stripped.startswith("#"):
            break
        lines.append(stripped.lstrip("#").strip())
    return " ".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1, writing nothing, if the page is not what conf/ gives")
    parser.add_argument("--out", type=Path, default=PAGE,
                        help=f"the page (default {PAGE}, run in the repository's checkout)")
    args = parser.parse_args(argv)
    return write_or_check(render(), args.out, args.check, "config-reference")


def write_or_check(page: str, out: Path, check: bool, command: str) -> int:
    """Write a generated page, or (``check``) exit 1 without writing if ``out`` is not it;
    ``command`` is the rs-lightning subcommand that writes it. The page's folder must
    exist (the checkout's docs/reference/): elsewhere, one line and exit status 2."""
    if not out.parent.is_dir():
        print(f"error: --out: {out.parent} is not a folder: run rs-lightning {command} in the "
              "repository's checkout, or give --out PATH", file=sys.stderr)
        return 2
    if check:
        if not out.is_file() or out.read_text() != page:
            print(f"error: {out} is stale: run rs-lightning {command}", file=sys.stderr)
            return 1
        return 0
    out.write_text(page)
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
