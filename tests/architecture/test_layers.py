"""The layer order written in the README's Architecture section, read from the imports.

Each top-level package sits in one layer (LAYERS, bottom first); a module may
import its own layer or any layer below, never one above, and no modules may
import each other in a circle. The few modules that combine apps by design
(views, APIs, URLs, admin, management commands, app configs: PAGES_FIRST) sit
on top whatever their package. Imports inside functions count too: a late
import is still an arrow. Only `if TYPE_CHECKING:` imports are left out (they
never run).
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Bottom first: each top-level package and the layer it sits in.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("libraries: no models, import no app", ("core", "agent")),
    ("the fleet", ("clusters",)),
    ("health", ("health",)),
    ("remediation, jobs and the Slurm sync", ("remediation", "jobs", "sync")),
    ("demand: training and inference follow it", ("demand",)),
    ("reports, identity and the demo", ("reports", "identity", "demo")),
    ("the portal: settings, plumbing and the pages that combine apps", ("portal",)),
]
APPS = tuple(package for _, packages in LAYERS for package in packages)
PAGES_FIRST = (  # modules under the patterns above that are pages all the same
    "*.views",
    "*.views.*",
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
    package = module.split(".")[0]
    for index, (_, packages) in enumerate(LAYERS):
        if package in packages:
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


def test_the_libraries_import_no_app_and_the_agent_no_django():
    """core/ is the bottom library (it may use Django, never an app), and agent/ runs on
    GPU nodes where Django is not installed."""
    found = []
    for module, path in project_modules().items():
        package = module.split(".")[0]
        if package not in ("core", "agent"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top in APPS and top not in ("core", "agent"):
                    found.append(f"{module} imports {name}")
                if package == "agent" and top in ("django", "rest_framework", "channels", "core"):
                    found.append(f"{module} imports {name}")
    assert found == []
