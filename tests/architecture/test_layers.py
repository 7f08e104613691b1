"""The layer order written in the README's Architecture section, read from the imports.

Every module of portal/, clusters/, jobs/ and health/ is put in a layer by the
first pattern of LAYERS that matches its name; a module may import its own
layer or any layer below, never one above, and no modules may import each other
in a circle. Imports inside functions count too: a late import is still an
arrow. Only `if TYPE_CHECKING:` imports are left out (they never run).
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("portal", "clusters", "jobs", "health")

# Bottom first. The first pattern that matches a module's name gives its layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "roles, the live sender and libraries without Django",
        (
            "portal.env",
            "portal.roles",
            "portal.live",
            "portal.inputs",
            "portal.sql",
            "health.xid",
            "health.agent*",
            "health.parsers*",
            "health.checks*",
        ),
    ),
    (
        "fleet",
        (
            "clusters.models",
            "clusters.status",
            "clusters.holders",
            "clusters.backends*",
            "clusters.board",
            "clusters.fleet",
            "clusters.live",
        ),
    ),
    ("health", ("health.models", "health.ingest", "health.live", "health.queries")),
    ("remediation and jobs", ("clusters.remediation.*", "jobs.*", "clusters.*")),
    ("pages", ("*",)),
]
PAGES_FIRST = (  # modules under the patterns above that are pages all the same
    "*.views",
    "*.api*",
    "*.urls",
    "*.api_urls",
    "*.admin",
    "*.management*",
    "*.consumers",
    "*.apps",
)


def layer_of(module: str) -> int:
    if any(fnmatch.fnmatchcase(module, pattern) for pattern in PAGES_FIRST):
        return len(LAYERS) - 1
    for index, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns):
            return index
    raise AssertionError(module)


def project_modules() -> dict[str, Path]:
    found = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_by(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules MODULE imports (a package's name when no module matches)."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                names.append(submodule if submodule in modules else base)
    found = set()
    for name in names:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in modules and name != module:
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_by(name, path, modules) for name, path in modules.items()}


def test_every_import_points_down_the_layer_order():
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle():
    graph = import_graph()
    circles, done, path = [], set(), []

    def visit(module):
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
            return
        if module in done:
            return
        path.append(module)
        for target in sorted(graph.get(module, ())):
            # A package's __init__ re-exporting its submodules is not a circle.
            if not target.startswith(module + "."):
                visit(target)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert circles == []
