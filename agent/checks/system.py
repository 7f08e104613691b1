"""Node checks that do not involve the GPUs: InfiniBand, disks, memory, CPU, force-drain."""

import hashlib
import math
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from pathlib import Path

from agent.checks.base import (
    Check,
    CheckContext,
    Mode,
    ToolMissing,
    Verdict,
    failed,
    passed,
)
from agent.checks.slurm import slurm_node

_GIB = 1024**3


def probe_force_drain(ctx: CheckContext, timeout_s: float) -> Verdict:
    """Operator switch: while the fail file exists the node reports unhealthy and drains."""
    path = ctx.config.get("fail_file")
    if not path:
        raise ToolMissing("no fail_file configured")
    fail_file = Path(path)
    if not fail_file.exists():
        return passed(f"{fail_file} absent")
    note = fail_file.read_text(errors="replace").strip().splitlines()
    reason = f": {note[0][:120]}" if note else ""
    return failed(f"force-drain file {fail_file} present{reason}")


def infiniband_ports(sysfs_root: Path) -> list[Path]:
    return sorted((sysfs_root / "class" / "infiniband").glob("*/ports/*"))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def probe_infiniband(ctx: CheckContext, timeout_s: float) -> Verdict:
    ports = infiniband_ports(ctx.sysfs_root)
    if not ports:
        raise ToolMissing("no InfiniBand devices")
    ignored = set(ctx.section("infiniband").get("ignore_devices", []))
    min_rate = ctx.section("infiniband").get("min_rate_gbps")
    problems, seen = [], []
    for port in ports:
        device = port.parent.parent.name
        if device in ignored:
            continue
        label = f"{device}/{port.name}"
        seen.append(label)
        state, phys, rate = (_read(port / name) for name in ("state", "phys_state", "rate"))
        if not state.endswith("ACTIVE"):
            problems.append(f"{label} state {state or 'unknown'}")
        elif not phys.endswith("LinkUp"):
            problems.append(f"{label} phys_state {phys or 'unknown'}")
        elif min_rate and _rate_gbps(rate) < float(min_rate):
            problems.append(f"{label} rate {rate} below {min_rate} Gb/sec")
    if problems:
        return failed("InfiniBand: " + "; ".join(problems), ports=seen)
    return passed(f"{len(seen)} InfiniBand port(s) active", ports=seen)


def _rate_gbps(rate: str) -> float:
    # sysfs: "400 Gb/sec (4X NDR)"
    try:
        return float(rate.split()[0])
    except (IndexError, ValueError):
        return 0.0


def probe_disk_free(ctx: CheckContext, timeout_s: float) -> Verdict:
    disk = ctx.section("disk")
    paths = disk.get("paths", ["/"])
    min_percent = float(disk.get("min_free_percent", 5))
    min_gib = float(disk.get("min_free_gb", 1))
    problems, free = [], {}
    for path in paths:
        try:
            usage = shutil.disk_usage(path)
        except OSError as error:
            problems.append(f"{path}: {error.strerror or error}")
            continue
        free_gib = usage.free / _GIB
        free_percent = 100 * usage.free / usage.total if usage.total else 0.0
        free[path] = round(free_gib, 2)
        if free_gib < min_gib or free_percent < min_percent:
            problems.append(f"{path} has {free_gib:.1f} GiB ({free_percent:.1f}%) free")
    if problems:
        return failed("low disk: " + "; ".join(problems), free_gib=free)
    return passed(f"{len(paths)} path(s) have enough free space", free_gib=free)


def mem_total_kib(proc_root: Path) -> int | None:
    for line in _read(proc_root / "meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return None


def probe_memory(ctx: CheckContext, timeout_s: float) -> Verdict:
    total_kib = mem_total_kib(ctx.proc_root)
    if total_kib is None:
        raise ToolMissing(f"no MemTotal in {ctx.proc_root / 'meminfo'}")
    total_mib = total_kib / 1024
    expected_mib, source = _expected_memory_mib(ctx, timeout_s)
    if expected_mib is None:
        return passed(f"{total_mib / 1024:.1f} GiB installed (no expectation set)")
    tolerance = float(ctx.section("memory").get("tolerance_percent", 3))
    if total_mib < expected_mib * (1 - tolerance / 100):
        return failed(
            f"only {total_mib:.0f} MiB RAM, expected {expected_mib:.0f} MiB ({source})",
            mem_total_mib=round(total_mib),
        )
    return passed(f"{total_mib:.0f} MiB RAM as expected", mem_total_mib=round(total_mib))


def _expected_memory_mib(ctx: CheckContext, timeout_s: float) -> tuple[float | None, str]:
    expected_gb = ctx.section("memory").get("expected_gb")
    if expected_gb is not None:
        return float(expected_gb) * 1024, "config"
    node = slurm_node(ctx, timeout_s)
    real_memory = (node or {}).get("RealMemory", "")
    # Slurm's RealMemory is the usable amount it was told about, in MiB.
    return (float(real_memory), "slurm RealMemory") if real_memory.isdigit() else (None, "")


_STRESS_SEED = b"medbay-cpu-stress"


def stress_worker(seconds: float) -> tuple[str, int]:
    """Hash and float work until the deadline; every round must give the same answer."""
    deadline = time.monotonic() + seconds
    expected, rounds = None, 0
    while rounds == 0 or time.monotonic() < deadline:
        digest = _STRESS_SEED
        for _ in range(2000):
            digest = hashlib.sha256(digest).digest()
        answer = f"{digest.hex()}:{sum(math.sqrt(i) for i in range(1, 5000)):.6f}"
        if expected is not None and answer != expected:
            raise ArithmeticError(f"round {rounds} computed a different result")
        expected, rounds = answer, rounds + 1
    return expected, rounds


def probe_cpu_stress(ctx: CheckContext, timeout_s: float) -> Verdict:
    seconds = float(ctx.section("cpu_stress").get("seconds", 0.5))
    workers = int(ctx.section("cpu_stress").get("workers", os.cpu_count() or 1))
    # fork: no re-import in the children, and this runs in short-lived single-threaded CLIs.
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(stress_worker, seconds) for _ in range(workers)]
        try:
            results = [future.result(timeout=timeout_s) for future in futures]
        except FuturesTimeout:
            return failed(f"CPU stress workers did not finish within {timeout_s:g}s")
        except Exception as error:  # noqa: BLE001 - any worker failure is the finding
            return failed(f"CPU stress worker failed: {type(error).__name__}: {error}")
    if len({answer for answer, _ in results}) != 1:
        return failed("CPU stress workers disagree on the same computation")
    rounds = sum(count for _, count in results)
    return passed(f"{workers} worker(s) ran {rounds} rounds for {seconds:g}s", workers=workers)


FORCE_DRAIN = Check(
    "force_drain", "operator force-drain file (config fail_file / --fail-file) present",
    Mode.PASSIVE, 1.0, probe_force_drain,
)  # fmt: skip
INFINIBAND = Check(
    "infiniband", "InfiniBand ports not ACTIVE/LinkUp or below the expected rate",
    Mode.PASSIVE, 5.0, probe_infiniband,
)  # fmt: skip
DISK_FREE = Check(
    "disk_free", "configured paths below free-space thresholds",
    Mode.PASSIVE, 5.0, probe_disk_free,
)  # fmt: skip
MEMORY = Check(
    "memory", "installed RAM below expected (config or Slurm RealMemory)",
    Mode.PASSIVE, 10.0, probe_memory,
)  # fmt: skip
CPU_STRESS = Check(
    "cpu_stress", "CPU faults under a short all-core load",
    Mode.ACTIVE, 30.0, probe_cpu_stress,
)  # fmt: skip
