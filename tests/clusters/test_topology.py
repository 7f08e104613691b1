import pytest

from clusters.backends.slurm_parsers.topology import TopologyError, parse_parts


def test_leaf_switches_racks_and_power_feeds_are_read_and_spines_left_out():
    text = """
# Slurm's topology.conf
SwitchName=leaf1 Nodes=gpu-[01-03]
SwitchName=leaf2 Nodes=gpu-[04-05],gpu-07   # a comment
SwitchName=spine Switches=leaf[1-2]
Rack=r12 Nodes=gpu-[01-02]
Power=pdu-3 Nodes=gpu-01,gpu-05
"""
    assert parse_parts(text) == {
        "switch leaf1": ("gpu-01", "gpu-02", "gpu-03"),
        "switch leaf2": ("gpu-04", "gpu-05", "gpu-07"),
        "rack r12": ("gpu-01", "gpu-02"),
        "power feed pdu-3": ("gpu-01", "gpu-05"),
    }


@pytest.mark.parametrize(
    "line, words",
    [
        ("Nodes=gpu-01", "expected SwitchName=, Rack= or Power= first"),
        ("Rack=r1", "r1 has no Nodes="),
        ("Rack r1 Nodes=gpu-01", "expected KEY=VALUE"),
    ],
)
def test_a_bad_line_is_refused_naming_its_file_and_line(line, words):
    with pytest.raises(TopologyError, match=f"site.parts line 2: {words}"):
        parse_parts(f"# ok\n{line}\n", source="site.parts")
