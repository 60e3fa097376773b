"""``teachflow gradescope DIR/grading --out autograder.zip``: the same grading on Gradescope.

Gradescope runs an autograder in a fresh Ubuntu container: it unpacks the uploaded zip into
``/autograder/source``, runs ``setup.sh`` once when the image is built, and for every
submission puts the learner's files in ``/autograder/submission``, runs
``/autograder/run_autograder``, and reads ``/autograder/results/results.json``. The zip
written here holds:

- ``README.md``: for the instructor: the base image to choose (`BASE_IMAGE`) and what the
  scripts do;
- ``setup.sh``: installs bubblewrap, a Python teachflow runs on (3.11 or newer: the image's own
  where it is new enough, as on Ubuntu 24.04; else Python 3.12 from Ubuntu's archive, or from
  the deadsnakes archive on Ubuntu 22.04, whose own is 3.10), and teachflow from the wheel
  beside it (built here from the teachflow that writes the zip, so both grade alike) into a
  virtual environment in ``/opt/teachflow``;
- ``run_autograder``: makes the bundle readable by root only, finds the submitted notebook
  (the one named as the exercise, else the only one), grades it with ``teachflow grade``
  (the strongest isolation the container allows: bubblewrap, else a user id of its own) and
  copies its ``results.json`` where Gradescope reads it; a submission with no notebook gets a
  results.json that says so;
- ``grading/``: the bundle;
- ``course.json``: the course's options given to ``teachflow gradescope`` (``--due``,
  ``--late-penalty``, ``--hidden-visibility``), which ``run_autograder`` grades with; the
  submission's time is the ``created_at`` of the ``submission_metadata.json`` Gradescope
  writes, and the due date, when ``--due`` was not given, its ``assignment.due_date``
  (`teachflow.grading.deadlines`);
- the wheel.

Both scripts read ``AUTOGRADER_ROOT`` (default ``/autograder``); ``setup.sh`` reads
``TEACHFLOW_PREFIX`` (default ``/opt/teachflow``) and ``run_autograder`` ``TEACHFLOW_PYTHON``
(default ``/opt/teachflow/bin/python``), so they also run in a folder laid out as Gradescope
lays it out, which is how the tests run them.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import teachflow
from teachflow.core.errors import GradingError
from teachflow.grading.bundle import MANIFEST, load_bundle
from teachflow.grading.deadlines import gradescope_times, parse_time
from teachflow.grading.feedback import VISIBILITIES
from teachflow.grading.grade import grade
from teachflow.viz.assets import widgets_folder

#: The image to choose in Gradescope's autograder settings (setup.sh works on both).
BASE_IMAGE = "Ubuntu 24.04 (or 22.04), the Base variant"
MIN_PYTHON = (3, 11)
COURSE = "course.json"
METADATA = "submission_metadata.json"

SETUP = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
# Base image: {base_image}. teachflow needs Python {major}.{minor} or newer: Ubuntu 24.04's own
# python3 is; Ubuntu 22.04's (3.10) is not, so Python 3.12 comes from the deadsnakes archive.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PREFIX="${{TEACHFLOW_PREFIX:-/opt/teachflow}}"
export DEBIAN_FRONTEND=noninteractive

new_enough() {{
  command -v "$1" >/dev/null 2>&1 &&
    "$1" -c 'import sys; sys.exit(sys.version_info < ({major}, {minor}))' 2>/dev/null
}}

find_python() {{
  for candidate in python3 python3.13 python3.12 python3.11; do
    if new_enough "$candidate"; then echo "$candidate"; return 0; fi
  done
  return 1
}}

apt-get update
apt-get install -y --no-install-recommends bubblewrap ca-certificates
if ! PYTHON=$(find_python); then
  echo "setup.sh: no Python {major}.{minor}+ on this image; installing Python 3.12"
  apt-get install -y --no-install-recommends python3.12 python3.12-venv || {{
    apt-get install -y --no-install-recommends software-properties-common gnupg &&
      add-apt-repository -y ppa:deadsnakes/ppa && apt-get update &&
      apt-get install -y --no-install-recommends python3.12 python3.12-venv
  }} || true
  PYTHON=$(find_python) || {{
    echo "setup.sh: could not install Python {major}.{minor}+; choose the {base_image} image" >&2
    exit 1
  }}
fi
if [ "$PYTHON" = python3 ]; then VENV_PACKAGE=python3-venv; else VENV_PACKAGE="$PYTHON-venv"; fi
apt-get install -y --no-install-recommends "$VENV_PACKAGE"
echo "setup.sh: teachflow runs on $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv "$PREFIX"
"$PREFIX/bin/pip" install --no-cache-dir "$ROOT/source/{wheel}[grading]"
"""

RUN = """\
#!/usr/bin/env bash
# Gradescope runs this for each submission; it writes $ROOT/results/results.json.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{TEACHFLOW_PYTHON:-/opt/teachflow/bin/python}}"
chmod -R go-rwx "$ROOT/source" "$ROOT/submission"   # the hidden tests: root's alone
mkdir -p "$ROOT/results"
exec "$PYTHON" -c 'import sys; from teachflow.grading.gradescope import run
sys.exit(run(sys.argv[1], sys.argv[2]))' "$ROOT" {notebook}
"""

README = """\
# Gradescope autograder for {notebook}

Written by `teachflow gradescope`. Upload this zip as the autograder of a Gradescope
"Programming Assignment".

- **Base image**: {base_image}. `setup.sh` installs Python {major}.{minor}+ where the image's own
  is older (Ubuntu 22.04: Python 3.12 from the deadsnakes archive), bubblewrap, and teachflow
  {version} from the wheel in this zip.
- **Each submission**: `run_autograder` grades the notebook named `{notebook}` (or the only
  notebook submitted) with `teachflow grade`: the learner's code in bubblewrap, the tests
  outside it. Hidden tests say only whether they passed until `--hidden-details` is given.
- **Course options** (`course.json`): due date {due}, late penalty {penalty} per started day,
  hidden tests' visibility `{visibility}`. A submission's time is the `created_at` of the
  `submission_metadata.json` Gradescope writes; without `--due`, the due date is its
  `assignment.due_date`.
- `grading/` holds the hidden tests: this zip is for instructors only.
"""


def autograder(bundle: str | os.PathLike[str], out: str | os.PathLike[str],
               due: str | None = None, late_penalty: float | None = None,
               hidden_visibility: str = "after_due_date") -> Path:
    """Write the autograder zip for the bundle at `bundle` to `out` (see the docstring);
    `due`, `late_penalty` and `hidden_visibility` are ``teachflow grade``'s."""
    loaded = load_bundle(bundle)
    if due is not None:
        parse_time(due, "--due")
    if hidden_visibility not in VISIBILITIES or (late_penalty is not None
                                                 and not 0 <= late_penalty <= 100):
        raise GradingError(f"--hidden-visibility {hidden_visibility}, --late-penalty "
                           f"{late_penalty}: one of {', '.join(VISIBILITIES)}, and a percent",
                           op="gradescope")
    course = {"due": due, "late_penalty": late_penalty, "hidden_visibility": hidden_visibility}
    wheel_name, wheel = build_wheel()
    path = Path(out)
    if path.suffix != ".zip":
        raise GradingError(f"{path} does not end in .zip", op="gradescope",
                           hint="teachflow gradescope DIR/grading --out autograder.zip")
    path.parent.mkdir(parents=True, exist_ok=True)
    versions = {"major": MIN_PYTHON[0], "minor": MIN_PYTHON[1], "base_image": BASE_IMAGE}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        _add(archive, "README.md", README.format(
            notebook=loaded.notebook, version=teachflow_version(), due=due or "from Gradescope",
            penalty="none" if late_penalty is None else f"{late_penalty:g}%",
            visibility=hidden_visibility, **versions).encode())
        _add(archive, "setup.sh", SETUP.format(wheel=wheel_name, **versions).encode(),
             executable=True)
        _add(archive, "run_autograder", RUN.format(notebook=_quoted(loaded.notebook)).encode(),
             executable=True)
        for name in (MANIFEST, "README.md"):
            source = loaded.path / name
            if source.exists():
                _add(archive, f"grading/{name}", source.read_bytes())
        _add(archive, COURSE, (json.dumps(course, indent=1) + "\n").encode())
        _add(archive, wheel_name, wheel)
    return path


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def teachflow_version() -> str:
    return importlib.metadata.distribution("teachflow").version


def build_wheel() -> tuple[str, bytes]:
    """A wheel of this teachflow: its package's files and its installed metadata.

    A wheel is a zip of the package and a ``.dist-info`` folder (METADATA, WHEEL,
    entry_points.txt, and RECORD: each file's sha256). Built from what is installed, it
    needs no build backend and no network."""
    distribution = importlib.metadata.distribution("teachflow")
    version = distribution.version
    package = Path(teachflow.__file__).resolve().parent
    info = f"teachflow-{version}.dist-info"
    files: dict[str, bytes] = {}
    for file in sorted(package.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
            files[f"teachflow/{file.relative_to(package).as_posix()}"] = file.read_bytes()
    widgets = Path(str(widgets_folder()))  # the front-end files, installed or a checkout's
    for file in sorted(widgets.rglob("*")):
        name = f"teachflow/widgets/{file.relative_to(widgets).as_posix()}"
        if file.is_file() and name not in files:
            files[name] = file.read_bytes()
    files[f"{info}/METADATA"] = (distribution.read_text("METADATA") or "").encode()
    files[f"{info}/entry_points.txt"] = (distribution.read_text("entry_points.txt")
                                         or "").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: teachflow gradescope\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            _add(wheel, name, data)
    return f"teachflow-{version}-py3-none-any.whl", buffer.getvalue()


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def run(root: str | Path, notebook: str) -> int:
    """``run_autograder``'s work: grade the one submitted notebook under `root`."""
    root = Path(root)

    results = root / "results" / "results.json"
    submitted = sorted(p for p in (root / "submission").rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts)
    named = [p for p in submitted if p.name == notebook]
    chosen = named[:1] or (submitted if len(submitted) == 1 else [])
    if not chosen:
        found = ", ".join(p.name for p in submitted) or "no notebook"
        results.write_text(json.dumps({
            "score": 0.0, "output": f"Submit the notebook {notebook} (found: {found}).",
            "tests": []}, indent=1) + "\n", encoding="utf-8")
        return 0
    private = Path(tempfile.mkdtemp(prefix="teachflow-results-"))
    try:
        done = grade(chosen, root / "source" / "grading", private, jobs=1, progress=False,
                     **_course(root, chosen[0]))
        shutil.copyfile(private / done.names[chosen[0]] / "results.json", results)
    except GradingError as error:  # (a deadline without a time: said, never "on time")
        results.write_text(json.dumps({
            "score": 0.0, "output": f"This submission could not be graded: {error.message}",
            "tests": []}, indent=1) + "\n", encoding="utf-8")
        return 1
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return 0


def _course(root: Path, notebook: Path) -> dict[str, Any]:
    """``grade``'s options for a whole course: course.json's, the due date and the
    submission's time from Gradescope's submission_metadata.json."""
    course = root / "source" / COURSE
    options = json.loads(course.read_text(encoding="utf-8")) if course.exists() else {}
    due, late_penalty = options.get("due"), options.get("late_penalty")
    found: dict[str, Any] = {"hidden_visibility": options.get("hidden_visibility",
                                                              "after_due_date")}
    metadata = root / METADATA
    if metadata.exists():
        created, due_date = gradescope_times(metadata)
        due = due or due_date
        found["submitted_at"] = {str(notebook): created}
    return {**found, "due": due, "late_penalty": late_penalty}

