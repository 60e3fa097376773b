"""What `make lab` and `make test` set up with: uv told where pip looks (tools/uv_flags.py), and
the exercises handed out once (tools/hand_out.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import hand_out  # noqa: E402  (tools/, above)
import uv_flags  # noqa: E402

#: `pip config list` on a machine whose pip has its own indexes, wheels and constraints.
LISTING = """\
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/srv/old-wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
install.index-url='https://mirror.example/simple'
global.index-url='https://ignored.example/simple'
"""


def test_uv_gets_every_place_pip_looks_with_pips_precedence() -> None:
    settings = uv_flags.pip_settings(LISTING)
    assert settings == {
        "find-links": ["/opt/wheels"],  # PIP_FIND_LINKS over pip.conf
        "constraint": ["/etc/xdg/pip/constraints.txt"],
        "extra-index-url": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"],
        "index-url": ["https://mirror.example/simple"],  # [install] over [global]
    }
    flags = uv_flags.uv_flags(settings)
    assert flags[:2] == ["--index-strategy", "unsafe-best-match"]  # pip's pick: the best version
    pairs = list(zip(flags[2::2], flags[3::2], strict=True))
    assert sorted(pairs) == sorted([
        ("--find-links", "/opt/wheels"), ("--constraints", "/etc/xdg/pip/constraints.txt"),
        ("--index", "file:///opt/pypi/simple"), ("--index", "file:///opt/pypi-more/simple"),
        ("--default-index", "https://mirror.example/simple")])


def test_no_index_and_a_pip_with_no_configuration() -> None:
    assert uv_flags.uv_flags(uv_flags.pip_settings(":env:.no-index='1'\n"))[-1] == "--no-index"
    assert uv_flags.uv_flags(uv_flags.pip_settings(":env:.no-index='0'\n")) == \
        ["--index-strategy", "unsafe-best-match"]
    assert uv_flags.uv_flags(uv_flags.pip_settings("")) == ["--index-strategy", "unsafe-best-match"]


def test_the_flags_come_from_this_pip() -> None:
    printed = subprocess.run([sys.executable, str(ROOT / "tools" / "uv_flags.py")],
                             capture_output=True, text=True, check=True).stdout.split()
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True, check=True).stdout
    assert printed == uv_flags.uv_flags(uv_flags.pip_settings(listing))


def test_the_exercises_are_handed_out_once(tmp_path: Path) -> None:
    masters = sorted((ROOT / "exercises").glob("*.ipynb"))[:2]
    for master in masters:
        shutil.copy(master, tmp_path)
    written = hand_out.hand_out(tmp_path)
    assert [p.name for p in written] == [m.name for m in masters]
    release = tmp_path / "release" / masters[0].name
    assert "### BEGIN SOLUTION" not in release.read_text()  # the learner's copy
    release.write_text("the learner's work")
    (tmp_path / "release" / masters[1].name).unlink()
    assert hand_out.hand_out(tmp_path) == [tmp_path / "release" / masters[1].name]
    assert release.read_text() == "the learner's work"
