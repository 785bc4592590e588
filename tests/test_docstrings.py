"""Every public function, class and method has a docstring: the API reference (mkdocstrings, docs/api/) renders
each one, and an undocumented one is a blank entry there (issue 33). Public: a name not starting with "_", at a
module's top level or in a public class (nested classes too); functions inside functions are not API."""

from __future__ import annotations

import ast
from pathlib import Path

import fpt

SOURCE = Path(fpt.__file__).parent

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def undocumented(source: str) -> list[str]:
    """The public functions, classes and methods of a module's source without a docstring, as "Class.method:line"."""
    found = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, DEFINITIONS) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    found.append(f"{prefix}{node.name}:{node.lineno}")
                if isinstance(node, ast.ClassDef):
                    walk(node.body, f"{prefix}{node.name}.")

    walk(ast.parse(source).body, "")
    return found


def _public_files() -> list[Path]:
    """The package's modules but private ones (__main__): what the API reference can show."""
    return sorted(
        path
        for path in SOURCE.rglob("*.py")
        if not any(part.startswith("_") and part != "__init__.py" for part in path.relative_to(SOURCE).parts)
    )


def _report(paths: list[Path]) -> list[str]:
    return [f"{path.relative_to(SOURCE)}: {name}" for path in paths for name in undocumented(path.read_text())]


def test_the_walk_finds_what_lacks_a_docstring():
    source = '''
def bare(): pass
def _private(): pass
def documented():
    """Yes."""
    def inner(): pass
class Public:
    def method(self): pass
    @property
    def value(self): return 1
    def _helper(self): pass
    class Nested:
        def deep(self): pass
class _Hidden:
    def method(self): pass
async def waiting(): pass
'''
    assert undocumented(source) == [
        "bare:2",
        "Public:7",
        "Public.method:8",
        "Public.value:10",
        "Public.Nested:12",
        "Public.Nested.deep:13",
        "waiting:16",
    ]


def test_every_public_definition_has_a_docstring():
    missing = _report(_public_files())
    assert missing == [], "public definitions without a docstring:\n" + "\n".join(missing)
