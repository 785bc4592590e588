"""The documentation site: every public module has a page in the API reference, every page is in the
navigation, and the pages link only to what exists. `make docs` (mkdocs build --strict) checks the
rendering; these checks run without MkDocs, in the fast tier."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import fpt

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCE = Path(fpt.__file__).parent


def _public_modules() -> set[str]:
    names = set()
    for path in SOURCE.rglob("*.py"):
        parts = ("fpt",) + path.relative_to(SOURCE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(part.startswith("_") for part in parts[1:]) or parts[1:2] == ("cli",):
            continue  # private, __main__, and the command line (documented by its --help and the pages)
        names.add(".".join(parts))
    return names


def _nav_files(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [f for value in node.values() for f in _nav_files(value)]
    return [f for item in node for f in _nav_files(item)]


def _config() -> dict:
    # the hooks: entry and the !! tags Material may use are read as plain data
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)


def test_every_public_module_has_a_place_in_the_api_reference():
    documented = set()
    for page in [DOCS / "api.md", *(DOCS / "api").glob("*.md")]:
        documented |= set(re.findall(r"^::: ([\w.]+)$", page.read_text(), re.M))
    missing = sorted(_public_modules() - documented)
    assert not missing, f"add `::: NAME` for these to a page under docs/api/: {missing}"
    unknown = sorted(documented - _public_modules())
    assert not unknown, f"docs/api names modules that do not exist: {unknown}"


def test_every_name_fpt_exports_has_a_docstring():
    # the top level is the API most programs use; the reference renders only documented names there
    # (GROUPS and POLICIES are data: their docstrings are the strings after them in fpt.core.choices)
    import griffe

    package = griffe.load("fpt", search_paths=[str(SOURCE.parent)])
    bare = [name for name in fpt.__all__ if not package[name].docstring]
    assert not bare, f"give these a docstring: {bare}"


def test_every_page_is_in_the_navigation_and_every_entry_exists():
    nav = set(_nav_files(_config()["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    # pages the hook brings in from outside docs/ (docs/hooks.py): they live where GitHub shows them
    benchmarks = {p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks").glob("*.md")}
    outside = benchmarks | {"contributing.md"}
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    assert nav - pages - outside == set(), "nav entries without a page"
    assert benchmarks - nav == set(), "benchmarks pages missing from mkdocs.yml's nav"
    assert "benchmarks/README.md" in benchmarks and (ROOT / "CONTRIBUTING.md").exists()


def _relative_links(text: str) -> list[str]:
    """The targets of a Markdown page's relative links, less their #anchors."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    return [link for link in links if "://" not in link]


def test_the_docs_pages_links_resolve_on_github_too():
    # GitHub shows docs/*.md as files: a link must resolve from docs/ on disk, not only on the site
    # (docs/hooks.py points ../benchmarks/*.md and ../CONTRIBUTING.md at their places there)
    broken = []
    for page in sorted(DOCS.rglob("*.md")):
        broken += [
            f"{page.name}: {link}" for link in _relative_links(page.read_text()) if not (page.parent / link).exists()
        ]
    assert not broken, broken


def test_the_benchmarks_pages_links_resolve_on_github_too():
    # the summary links each topic's page, the pages link each other and their figures under results/
    pages = sorted((ROOT / "benchmarks").glob("*.md"))
    broken = [f"{page.name}: {link}" for page in pages for link in _relative_links(page.read_text())]
    broken = [entry for entry in broken if not (ROOT / "benchmarks" / entry.split(": ", 1)[1]).exists()]
    assert not broken, broken


def test_the_readme_links_only_to_files_that_exist():
    # GitHub shows README.md first: its relative links (docs pages, benchmarks, contributing) must resolve
    relative = _relative_links((ROOT / "README.md").read_text())
    assert relative, "the README links to its docs"
    broken = [link for link in relative if not (ROOT / link).exists()]
    assert not broken, broken


def test_every_benchmark_script_has_a_row_in_the_benchmarks_scripts_table():
    table = (ROOT / "benchmarks" / "scripts.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh"))
    missing = [name for name in scripts if f"| `{name}` |" not in table]
    assert not missing, f"add a row to benchmarks/scripts.md's table for {missing}"
