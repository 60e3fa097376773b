"""uv's flags for installing what pip installs here (the Makefile installs with uv).

uv reads no pip configuration, but a machine's pip can be told where to find packages in its
config files and PIP_* variables: extra indexes, folders of wheels (find-links), constraints.
This prints those settings as uv's flags, read from ``pip config list`` (pip's own merge of its
files and variables), and asks uv for pip's choice among indexes: the best version that any
index has (``--index-strategy unsafe-best-match``), not the version of the first index that has
the package.

    uv pip install $(python tools/uv_flags.py) -e ".[lab]"
"""

from __future__ import annotations

import ast
import subprocess
import sys

#: pip's setting -> uv's flag, for every setting that says where packages come from.
FLAGS = {
    "index-url": "--default-index",
    "extra-index-url": "--index",
    "find-links": "--find-links",
    "constraint": "--constraints",
    "no-index": "--no-index",
    "trusted-host": "--allow-insecure-host",
}
#: Where pip's settings for an install come from, the weakest first.
SECTIONS = ["global", "install", ":env:"]


def pip_settings(listing: str) -> dict[str, list[str]]:
    """Each of `FLAGS`' settings in ``pip config list``'s `listing` (``section.name='value'``
    lines), as pip's install sees it: ``:env:`` over ``install`` over ``global``."""
    found: dict[str, tuple[int, list[str]]] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if name not in FLAGS or section not in SECTIONS:
            continue
        rank = SECTIONS.index(section)
        if rank >= found.get(name, (-1, []))[0]:
            found[name] = (rank, str(ast.literal_eval(value)).split())
    return {name: values for name, (_, values) in found.items()}


def uv_flags(settings: dict[str, list[str]]) -> list[str]:
    flags = ["--index-strategy", "unsafe-best-match"]
    for name, values in settings.items():
        if name == "no-index":
            flags += [FLAGS[name]] if values and values[0].lower() in ("1", "true", "yes") else []
        else:
            flags += [part for value in values for part in (FLAGS[name], value)]
    return flags


def main() -> None:
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True, check=True).stdout
    print(" ".join(uv_flags(pip_settings(listing))))


if __name__ == "__main__":
    main()
