"""PCI address normalisation shared by every parser."""

import re

_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<device>[0-9a-f]{1,2})"
    r"(?:\.[0-7])?$"
)


def normalise_pci(address: str) -> str | None:
    """`00000000:3B:00.0`, `0000:3b:00`, `PCI:0000:3b:00` -> `0000:3b:00`; None if not PCI.

    The kernel log prints domain:bus:device without the function while nvidia-smi prints
    an 8-digit domain and the function, so both must collapse to one key to be matched.
    """
    text = address.strip().lower().removeprefix("pci:")
    match = _PCI_RE.match(text)
    if match is None:
        return None
    domain = (match["domain"] or "0")[-4:].rjust(4, "0")
    return f"{domain}:{match['bus'].rjust(2, '0')}:{match['device'].rjust(2, '0')}"
