"""Which nodes share a part that can take them all down at once: a leaf switch, a rack,
a power feed.

Slurm's `topology.conf` names leaf switches and their nodes (`SwitchName=leaf3
Nodes=gpu-[01-16]`); a spine switch lists `Switches=` instead and is left out, as every
node sits under one and it would group the whole cluster. A site file in the same
syntax names racks and power feeds (`Rack=r12 Nodes=gpu-[01-16]`, `Power=pdu-3
Nodes=gpu-[01-32]`). Nothing here reads a file or imports Django.
"""

from __future__ import annotations

from clusters.backends.slurm_syntax import expand_hostlist

# The key a line starts with, and the word a person reads for that kind of part.
PART_KINDS = {"switchname": "switch", "rack": "rack", "power": "power feed"}


class TopologyError(ValueError):
    """A line that names no part, or a part without its nodes."""


def parse_parts(text: str, *, source: str = "topology") -> dict[str, tuple[str, ...]]:
    """{"switch leaf3": ("gpu-01", ...), "rack r12": (...)} from topology.conf's syntax."""
    parts: dict[str, tuple[str, ...]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if not sep:
                raise TopologyError(f"{source} line {number}: expected KEY=VALUE, got {word!r}")
            fields[key.lower()] = value
        kind = next((k for k in fields if k in PART_KINDS), None)
        if kind is None or not fields[kind]:
            raise TopologyError(
                f"{source} line {number}: expected SwitchName=, Rack= or Power= first"
            )
        if "nodes" not in fields:
            if kind == "switchname" and "switches" in fields:
                continue  # a spine: every node is under one
            raise TopologyError(f"{source} line {number}: {fields[kind]} has no Nodes=")
        nodes = expand_hostlist(fields["nodes"])
        if nodes:
            parts[f"{PART_KINDS[kind]} {fields[kind]}"] = nodes
    return parts
