"""Agent config file: JSON or TOML, one flat table plus a few sections.

expected_gpus = 8                   # else taken from Slurm GRES of SLURMD_NODENAME
checks = ["force_drain", "nvidia_smi_responds", "gpu_count", "ecc_remap"]  # default set
fail_file = "/etc/medbay/force-drain"   # operator switch: node fails while it exists
node = "gpu-01"                     # else SLURMD_NODENAME, else the host name
slurm_conf = "/etc/slurm/slurm.conf"

[disk]        paths = ["/", "/tmp"], min_free_percent = 5, min_free_gb = 1
[memory]      expected_gb = 2048, tolerance_percent = 3
[infiniband]  min_rate_gbps = 400, ignore_devices = ["mlx5_bond_0"]
[dcgm]        diag_level = 1
[cpu_stress]  seconds = 0.5
[tools]       nvidia-smi = "/usr/bin/nvidia-smi", dcgmi = "...", scontrol = "..."
"""

import json
import tomllib
from pathlib import Path


class ConfigError(ValueError):
    """The config file is missing or unreadable; the message names the file."""


def load_config(path: str | Path | None) -> dict:
    if path is None:
        return {}
    config_path = Path(path)
    try:
        text = config_path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read config {config_path}: {error.strerror}") from error
    try:
        if config_path.suffix == ".toml":
            return tomllib.loads(text)
        return json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"invalid config {config_path}: {error}") from error


def with_overrides(
    config: dict,
    *,
    fail_file: str | None = None,
    scontrol: str | None = None,
    slurm_conf: str | None = None,
    node: str | None = None,
) -> dict:
    """A copy of the config with command-line options applied on top."""
    merged = {**config, "tools": dict(config.get("tools", {}))}
    if fail_file:
        merged["fail_file"] = fail_file
    if scontrol:
        merged["tools"]["scontrol"] = scontrol
    if slurm_conf:
        merged["slurm_conf"] = slurm_conf
    if node:
        merged["node"] = node
    return merged
