"""binder/ gives mybinder.org what `make lab` gives a learner: the same packages, the same
Python, teachflow itself installed."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> list[str]:
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_binder_installs_exactly_the_dependencies_and_the_lab_extra_of_pyproject() -> None:
    project = _pyproject()["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["lab"]
    assert sorted(_requirements()) == sorted(wanted)


def test_binder_runs_a_python_that_pyproject_accepts() -> None:
    (version,) = re.findall(r"^python-(\d+\.\d+)$", (BINDER / "runtime.txt").read_text(), re.M)
    floor = re.fullmatch(r">=(\d+\.\d+)", _pyproject()["project"]["requires-python"]).group(1)
    assert tuple(map(int, version.split("."))) >= tuple(map(int, floor.split(".")))


def test_post_build_installs_teachflow_itself_and_is_executable() -> None:
    post_build = BINDER / "postBuild"
    assert os.access(post_build, os.X_OK)
    commands = [line for line in post_build.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert any(re.search(r"pip install .*-e \.$", line) for line in commands)


def test_the_readme_launch_badge_opens_the_lessons_on_binder() -> None:
    readme = (ROOT / "README.md").read_text()
    badge = re.search(r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]\((\S+)\)", readme)
    assert badge is not None
    assert badge.group(1).startswith("https://mybinder.org/v2/gh/")
    assert "urlpath=lab/tree/lessons" in badge.group(1)


def test_binder_gives_jupyterlab_the_settings_make_lab_gives_it() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert '--LabApp.app_settings_dir="$(CURDIR)/lab-settings"' in makefile
    post_build = (BINDER / "postBuild").read_text()
    assert re.search(r"cp lab-settings/overrides\.json \"\$settings/\"", post_build)
    assert "/share/jupyter/lab/settings" in post_build  # JupyterLab's own settings folder
