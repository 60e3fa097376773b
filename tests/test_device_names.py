"""A device's name equals each of its spellings, as API.md names them (``"cpu:0"``)."""

from __future__ import annotations

import teachflow as tfl


def test_a_tensors_device_equals_every_spelling_of_its_device() -> None:
    t = tfl.ones(3)
    assert t.device == "cpu:0" and t.device == "cpu" and t.device == "CPU"
    assert (t.device != "cpu:0") is False
    assert t.device != "gpu" and t.device != "cpu:1" and t.device != "laptop"
    assert str(t.device) == "cpu" and f"{t.device}" == "cpu", "it prints as teachflow's name"


def test_the_devices_listed_are_found_by_any_spelling() -> None:
    assert "cpu:0" in tfl.devices() and "cpu" in tfl.devices()


def test_a_logical_device_keeps_its_index() -> None:
    tfl.set_logical_devices("cpu", 2)
    try:
        u = tfl.ones(2).to("cpu:1")
        assert u.device == "cpu:1" and u.device != "cpu:0"
        assert tfl.ones(2).to(u.device).device == "cpu:1"
    finally:
        tfl.set_logical_devices("cpu", 1)
