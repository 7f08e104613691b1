"""DCGM checks: passive health watches and the active `dcgmi diag` run levels."""

import subprocess

from agent.checks.base import Check, CheckContext, Mode, Verdict, failed, passed, warned
from agent.parsers import dcgm

# Typical run times (§2.3) plus headroom; levels 3 and 4 belong in maintenance windows.
DIAG_TIMEOUTS_S = {1: 60.0, 2: 300.0, 3: 1200.0, 4: 3600.0}


def probe_dcgm_health(ctx: CheckContext, timeout_s: float) -> Verdict:
    output = ctx.run_tool("dcgmi", ["health", "-c"], timeout_s)
    report = dcgm.parse_health(output.stdout)
    if report.overall is None:
        return failed(f"dcgmi health gave no verdict (exit {output.returncode})")
    summary = "; ".join(report.messages) or f"overall {report.overall}"
    if report.overall == dcgm.HealthStatus.FAILURE:
        return failed(summary)
    if report.overall == dcgm.HealthStatus.WARNING:
        return warned(summary)
    return passed("DCGM health watches report healthy")


def probe_dcgm_diag(ctx: CheckContext, timeout_s: float) -> Verdict:
    level = int(ctx.section("dcgm").get("diag_level", 1))
    limit = float(ctx.section("dcgm").get("diag_timeout_s", DIAG_TIMEOUTS_S.get(level, timeout_s)))
    try:
        output = ctx.run_tool("dcgmi", ["diag", "-r", str(level)], limit)
    except subprocess.TimeoutExpired:
        return failed(f"dcgmi diag -r {level} did not finish within {limit:g}s")
    tests = dcgm.parse_diag(output.stdout)
    failures = [f"{t.name}: {t.detail or 'fail'}" for t in tests if t.result == "fail"]
    if failures:
        return failed(f"dcgmi diag -r {level}: " + "; ".join(failures), level=level)
    if output.returncode != 0:
        return failed(f"dcgmi diag -r {level} exited {output.returncode}", level=level)
    warnings = [t.name for t in tests if t.result == "warn"]
    if warnings:
        return warned(f"dcgmi diag -r {level} warnings: {', '.join(warnings)}", level=level)
    return passed(f"dcgmi diag -r {level}: {len(tests)} test(s) passed or skipped", level=level)


DCGM_HEALTH = Check(
    "dcgm_health", "DCGM health watches: ECC, PCIe replays, NVLink, thermal, InfoROM",
    Mode.PASSIVE, 30.0, probe_dcgm_health,
)  # fmt: skip
DCGM_DIAG = Check(
    "dcgm_diag", "DCGM diagnostics (level from [dcgm] diag_level; 1 is light, 2+ needs idle GPUs)",
    Mode.ACTIVE, 60.0, probe_dcgm_diag,
)  # fmt: skip
