"""Devices in the pictures: which device runs each node, told by the fill of its box.

A graph cut across devices (the passes `place` and `partition`) is read by its pieces: every
node's box is filled with its device's colour, the CPU's own device (``"cpu"``) left plain, and
the legend names each device. The colours are Paul Tol's pale scheme, which the common
colour-vision deficiencies still tell apart; and no one depends on colour alone: a box's text
says where it runs (``%4 = matmul %2, %2 : f32[64,64] on cpu:1``), and a transfer (a ``copy``
node) is a box of its own with a pill saying from where to where. The widget draws with the
same colours (``widgets/stepper/common.js``).
"""

from __future__ import annotations

from typing import Any

#: The fills of the devices after the CPU's own: cpu:1, cpu:2, ... in turn; the GPU's is the
#: fourth (pale blue, pale yellow, pale green, pale red, pale cyan, pale grey).
DEVICE_FILLS = ("#bbccee", "#eeeebb", "#ccddaa", "#ffcccc", "#cceeff", "#dddddd")
#: The fill of a box on the CPU's own device.
PLAIN = "#ffffff"


def device_fill(device: str) -> str:
    """The fill of a box on `device` (``"cpu"``, ``"cpu:1"``, ``"gpu"``)."""
    if device == "cpu":
        return PLAIN
    kind, _, index = device.partition(":")
    start = 3 if kind == "gpu" else -1
    return DEVICE_FILLS[(start + int(index or 0)) % len(DEVICE_FILLS)]


def devices_shown(entries: list[dict]) -> list[str]:
    """The devices the stepper's entries run on, for its legend: none when all run on one."""
    found = sorted({entry.get("device", "cpu") for entry in entries})
    return found if len(found) > 1 else []


def device_fields(value: Any, node: Any) -> dict:
    """What the stepper's entry of `value` (made by `node`, or None) says of devices: where it
    lives when that is not the CPU's own device, and a transfer's two ends."""
    fields: dict[str, Any] = {}
    if value.spec.device != "cpu":
        fields["device"] = value.spec.device
    if node is not None and node.op.device_param == "dst":  # a ``copy`` between devices
        fields["transfer"] = [node.params["src"], node.params["dst"]]
    return fields
