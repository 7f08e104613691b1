"""Capabilities are declared, not probed (STYLE.md, habit 14).

A backend, fleet or provider that can do more than its protocol says so in
clusters/backends/capabilities.py, and a caller asks `isinstance(backend,
RepairsGpus)`. This reads every module of every top-level package and fails on
`hasattr(...)` and on `getattr(x, "name", default)`, the two ways a probe for an
undeclared method is written. Reads of Django settings are left to the settings
module's own defaults; the few optional attributes that are no backend's (a
thread-local, a request marked by middleware) are named below with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (the object read, the attribute) -> why reading it with a default is no probe.
NOT_A_BACKEND = {
    ("_trip", "events"): "a thread-local: unset until this thread gathers live events",
    ("_trip", "gathered"): "a thread-local: unset until this thread gathers live events",
    ("_trip", "regions"): "a thread-local: unset until this thread holds live regions",
    ("loop", "_thread_id"): "asyncio's loop records its thread only once it runs",
    ("nvml", "nvmlDeviceGetCurrentClocksEventReasons"): "renamed in newer nvidia-ml-py",
    ("request", "session"): "a request without the session middleware has none",
    ("getattr(request, 'session', None)", "session_key"): "no session, no key",
    ("self.scope.get('session')", "session_key"): "a socket without a session has no key",
    ("request", "axes_locked_out"): "set by django-axes only on a locked-out log-in",
    ("self.request", "medbay_login_problem"): "set by the log-in backends only on a refusal",
    ("response", "streaming"): "a test client's response may lack it",
    ("user", "is_authenticated"): "an anonymous or missing user",
    ("user", "_medbay_roles"): "the roles cached on the user object after the first read",
    ("user", "researcher_profile"): "a user without a researcher profile row",
    ("remediation", "node"): "a notification may come without a remediation run",
    ("getattr(remediation, 'node', None)", "name"): "no run, no node name",
    ("job", "pk"): "an unsaved job has no row to point at",
    ("row", "batch_count"): "counted on the in-memory row during one ingest batch",
    ("self", "_posting"): "set by the view for its POST only",
    ("instance", "_medbay_ends_sessions"): "marked by the account actions that end sessions",
}


def project_packages() -> list[Path]:
    """Every top-level package of the project (the tests are not one)."""
    return sorted(init.parent for init in ROOT.glob("*/__init__.py") if init.parent.name != "tests")


def is_settings(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "settings") or (
        isinstance(node, ast.Attribute) and node.attr == "settings"
    )


def read_with_default(node: ast.AST) -> tuple[str, str] | None:
    """(the object read, the attribute) of a `getattr(x, "name", default)` call."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) == 3
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and not is_settings(node.args[0])
    ):
        return ast.unparse(node.args[0]), node.args[1].value
    return None


def probes_in(source: str) -> list[str]:
    """Each probe as `line: call`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        is_hasattr = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "hasattr"
        )
        read = read_with_default(node)
        if is_hasattr or (read is not None and read not in NOT_A_BACKEND):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda probe: int(probe.split(":")[0]))


def project_modules() -> list[Path]:
    return [
        path
        for package in project_packages()
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.parts
    ]


def test_the_packages_are_found():
    names = {package.name for package in project_packages()}
    assert {"clusters", "health", "jobs", "portal"} <= names


def test_no_module_probes_for_an_undeclared_capability():
    probes = [
        f"{path.relative_to(ROOT)}:{probe}"
        for path in project_modules()
        for probe in probes_in(path.read_text())
    ]
    assert probes == [], "declare it in clusters/backends/capabilities.py instead"


def test_the_scan_catches_both_ways_of_probing():
    source = (
        "if hasattr(backend, 'repair_gpu'): pass\n"
        "read = getattr(ctx.fleet, 'holders', None)\n"
        "conf = getattr(backend, 'slurm_conf', '')\n"
        "fine = getattr(settings, 'MEDBAY_X', 1) + getattr(django_settings.settings, 'Y', 2)\n"
        "also_fine = getattr(backend, name, None) or getattr(backend, 'name')\n"
    )
    assert probes_in(source) == [
        "1: hasattr(backend, 'repair_gpu')",
        "2: getattr(ctx.fleet, 'holders', None)",
        "3: getattr(backend, 'slurm_conf', '')",
    ]


def test_every_exception_is_still_read_somewhere():
    """An entry whose read is gone must go too, or it would quietly allow a new probe."""
    seen = {
        read
        for path in project_modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if (read := read_with_default(node)) is not None
    }
    assert sorted(set(NOT_A_BACKEND) - seen) == []
