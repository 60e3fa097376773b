"""The options of the ``%%compile`` line, checked before anything is compiled.

    %%compile --passes simplify,cse --device gpu --html stepper.html --no-show --name step
    %%compile --script      (if/while/for on tensors become graph control flow, as @tfl.script)

A wrong option is an error at the ``%%compile`` line, before the cell runs: an unknown or
repeated flag, a flag without its value, an unknown pass or device, a page that cannot be written,
or a ``--name`` that would overwrite a name the cell or the notebook uses.
"""

from __future__ import annotations

import builtins
import keyword
import os
import shlex
from typing import Any

from teachflow.compiler import Compilation
from teachflow.core.backends import get_backend
from teachflow.core.errors import SourceLocation, TeachflowError
from teachflow.passes import resolve

_OPTIONS_HINT = ("options: --passes a,b,c|none  --device cpu|gpu  --html PATH  --no-show  "
                 "--name NAME  --script")


def read_options(line: str, where: SourceLocation, taken: set[str] = frozenset(),
                 namespace: dict | None = None) -> dict:
    """The magic's options, checked before anything is compiled: a wrong one is an error that
    points at the ``%%compile`` line. ``--name`` must not overwrite a name the cell reads or
    binds (`taken`), nor anything of the notebook's (`namespace`) but a compilation."""

    def refuse(message: str, hint: str = _OPTIONS_HINT) -> TeachflowError:
        return TeachflowError(message, op="%%compile", hint=hint, location=where)

    try:
        words = shlex.split(line)
    except ValueError as err:  # an unclosed quote
        raise refuse(f"cannot read the options {line!r}: {err}") from None
    options: dict[str, Any] = {"passes": "default", "device": None, "html": None, "show": True,
                               "name": "compiled", "script": False}
    flags = {"--passes": "passes", "--device": "device", "--html": "html", "--name": "name",
             "--no-show": "show", "--script": "script"}
    seen: set[str] = set()
    i = 0
    while i < len(words):
        word = words[i]
        if word not in flags:
            raise refuse(f"unknown option {word!r}")
        if word in seen:
            raise refuse(f"{word} is given twice")
        seen.add(word)
        if word == "--no-show":
            options["show"] = False
        elif word == "--script":
            options["script"] = True
        else:
            if i + 1 == len(words) or words[i + 1].startswith("--"):
                raise refuse(f"{word} needs a value")
            options[flags[word]] = words[i + 1]
            i += 1
        i += 1
    name = options["name"]
    if not name.isidentifier() or keyword.iskeyword(name):
        raise refuse(f"--name {name!r} is not a Python name the notebook can use")
    held = (namespace or {}).get(name)
    if "--name" in seen and (name in taken or name == "result" or name in vars(builtins) or (
            held is not None and not isinstance(held, Compilation))):
        raise refuse(f"--name {name!r} would overwrite "
                     + ("a name the cell uses" if name in taken else "the cell's result"
                        if name == "result" else f"the notebook's {name}"
                        if held is not None else f"Python's own {name}"),
                     hint="pick another name for the compilation, e.g. --name compiled_step")
    if options["passes"] != "default":
        names = options["passes"].split(",")
        if not all(names):
            raise refuse(f"--passes {options['passes']!r} names an empty pass",
                         hint="list passes with commas (--passes simplify,cse), or write "
                              "--passes none for the graph as traced")
        options["passes"] = None if names == ["none"] else names
    if options["html"]:
        folder = os.path.dirname(os.path.abspath(options["html"]))
        if not os.path.isdir(folder):
            raise refuse(f"--html {options['html']!r}: there is no folder {folder}",
                         hint="write the page into a folder that exists")
        if os.path.isdir(options["html"]):
            raise refuse(f"--html {options['html']!r} is a folder, not a page",
                         hint="name the page to write, e.g. --html stepper.html")
    try:
        resolve(options["passes"])
        if options["device"]:
            get_backend(options["device"])
    except TeachflowError as err:  # the same error, at the %%compile line
        raise type(err)(err.message, op="%%compile", operands=err.operands, hint=err.hint,
                        location=where) from None
    return options
