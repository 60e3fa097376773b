"""Where a tensor's method is defined can be guessed: in the file named for its kind of op.

`teachflow/tensor/__init__.py` states the rule; `KINDS` is its table. Every public attribute of
`Tensor` (operators, methods, properties, and other libraries' names for them, which stand beside
what they name) and every ``tfl.`` function of the tensor chapter is defined in the file its kind
names. A method added to the wrong file fails, and so does one the table does not know yet: give
it a kind here and put it in that kind's file.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import teachflow as tfl
from teachflow.tensor.tensor import Tensor

CHAPTER = Path(tfl.__file__).resolve().parent / "tensor"

#: Each kind of op: the file of its methods, the place of its ``tfl.`` functions (a file, or a
#: section of functions.py; None: it has none), and its names: a method's, a function's or both.
KINDS = {
    "elementwise": ("elementwise.py", "functions.py: Elementwise", """
        __add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__
        __pow__ __rpow__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __neg__ __pos__ __abs__
        __lt__ __le__ __gt__ __ge__ __eq__ __ne__ __and__ __rand__ __or__ __ror__ __invert__
        __iadd__ __isub__ __imul__ __itruediv__
        exp log sqrt tanh relu sigmoid softplus abs clip clone maximum minimum where
        add sub subtract mul multiply div divide pow square neg negative eq ne lt le gt ge
        add_ sub_ mul_ div_ exp_ abs_ sqrt_ masked_fill sign round clamp clamp_min clamp_max
        clamp_ copy"""),
    "reductions": ("reductions.py", "functions.py: Reductions", """
        sum mean max min argmax argmin var softmax log_softmax
        amax amin std all any norm prod cumsum"""),
    "movement": ("movement.py", "functions.py: Movement", """
        __getitem__ __setitem__ __iter__ reshape view transpose T permute swapaxes unsqueeze
        squeeze flatten broadcast_to concatenate cat stack
        t mT ravel view_as reshape_as contiguous expand expand_as expand_dims repeat gather
        zero_ fill_"""),
    "linalg": ("linalg.py", "functions.py: Linear algebra", """
        __matmul__ __rmatmul__ matmul
        mm bmm dot mv"""),
    "conversion": ("conversion.py", None, """
        numpy item tolist __bool__ __float__ __int__ __index__ __format__ astype to cpu
        numpy_ to_numpy long int float double half bool type cuda is_cuda cpu_"""),
    "NumPy's protocols": ("interop.py", None, """
        __array__ __array_ufunc__ __array_function__"""),
    "what a tensor is": ("tensor.py", "tensor.py", """
        __init__ __hash__ shape dtype device ndim __len__ size numel dim spec requires_grad grad
        is_leaf grad_fn __repr__ __deepcopy__ __copy__ __reduce__ backward detach as_tensor
        nelement ndimension requires_grad_ detach_ data register_post_accumulate_grad_hook"""),
    "creation": (None, "factories.py", """
        tensor zeros ones full zeros_like ones_like full_like arange eye randn rand"""),
}

#: The kinds of op, whose methods and functions both are named for them.
OPS = ("elementwise", "reductions", "movement", "linalg")

#: What Python puts in every class body: not a tensor's attributes.
CLASS_MACHINERY = {"__module__", "__qualname__", "__doc__", "__slots__", "__weakref__",
                   "__dict__", "__annotations__", "__firstlineno__", "__static_attributes__"}


def kind_of(name: str) -> str | None:
    return next((kind for kind, (*_, names) in KINDS.items() if name in names.split()), None)


def defined_in(obj: object) -> Path | None:
    """The file that defines a function (a property's getter), if it is one."""
    obj = obj.fget if isinstance(obj, property) else obj
    return Path(inspect.getsourcefile(obj)).resolve() if inspect.isfunction(obj) else None


def place_of(function: object) -> str:
    """Where the chapter defines a function: its file, and in functions.py its section (the last
    ``# --- Section ---`` line above it)."""
    path = defined_in(function)
    if path is None or path.parent != CHAPTER:
        return str(path)
    if path.name != "functions.py":
        return path.name
    above = path.read_text("utf-8").splitlines()[:inspect.getsourcelines(function)[1]]
    sections = [m[1] for line in above if (m := re.match(r"# --- (.+?) -+$", line))]
    return f"functions.py: {sections[-1] if sections else None}"


def misplaced(cls: type) -> list[str]:
    """Each public attribute that `cls` or a class it inherits from defines outside the file of
    its kind (even where another class hides it), said as where it is and where it belongs."""
    found = []
    for klass in cls.__mro__[:-1]:  # (all but `object`)
        for name, value in sorted(vars(klass).items()):
            if name in CLASS_MACHINERY or (name.startswith("_") and not name.endswith("__")) \
                    or (name == "__hash__" and value is None):  # (Python's, beside an __eq__)
                continue
            kind = kind_of(name)
            if kind is None or KINDS[kind][0] is None:
                found.append(f"{name}: no kind in KINDS has it as a method")
                continue
            wanted = CHAPTER / KINDS[kind][0]
            where = {Path(inspect.getsourcefile(klass)).resolve(), defined_in(value)} - {None}
            if where != {wanted}:
                found.append(f"{name} ({kind}) is defined in {sorted(map(str, where))}, not in "
                             f"{wanted}")
    return found


def test_every_attribute_of_a_tensor_is_in_the_file_of_its_kind() -> None:
    assert misplaced(Tensor) == []


def test_every_function_of_the_tensor_chapter_is_in_the_file_of_its_kind() -> None:
    """Each ``tfl.`` function defined in the chapter, or named as an op of a kind with functions
    (a ``tfl.exp`` defined elsewhere would be misplaced too; ``tfl.grad`` is no op of a tensor)."""
    found = []
    for name, function in sorted(vars(tfl).items()):
        if not inspect.isfunction(function) or not (
                function.__module__.startswith("teachflow.tensor.") or kind_of(name) in OPS):
            continue
        kind = kind_of(name)
        if kind is None or KINDS[kind][1] is None:
            found.append(f"tfl.{name}: no kind in KINDS has it as a function")
        elif place_of(function) != KINDS[kind][1]:
            found.append(f"tfl.{name} ({kind}) is defined in {place_of(function)}, not in "
                         f"{KINDS[kind][1]}")
    assert found == []


def test_every_name_in_the_table_is_a_tensor_attribute_or_a_function() -> None:
    names = [name for *_, listed in KINDS.values() for name in listed.split()]
    assert len(names) == len(set(names)), "a name has one kind"
    assert [n for n in names if not hasattr(Tensor, n) and not hasattr(tfl, n)] == []


def test_a_method_in_the_wrong_file_or_of_no_kind_is_found() -> None:
    class Stray(Tensor):  # (defined here, in tests/: no kind's file)
        __slots__ = ()

        def exp(self) -> Tensor:
            return self

        def frobnicate(self) -> Tensor:
            return self

    assert misplaced(Stray) == [
        f"exp (elementwise) is defined in ['{Path(__file__).resolve()}'], not in "
        f"{CHAPTER / 'elementwise.py'}",
        "frobnicate: no kind in KINDS has it as a method"]


def test_each_file_of_the_chapter_is_named_in_its_reading_order_and_under_400_lines() -> None:
    docstring = ast.get_docstring(ast.parse((CHAPTER / "__init__.py").read_text("utf-8")))
    listed = re.findall(r"^- `(\w+)`", docstring, flags=re.MULTILINE)
    modules = {p.stem if p.parent == CHAPTER else p.parent.name
               for p in CHAPTER.rglob("*.py") if p.name != "__init__.py" or p.parent != CHAPTER}
    assert sorted(listed) == sorted(modules)
    long = [str(p) for p in CHAPTER.rglob("*.py") if len(p.read_text("utf-8").splitlines()) > 400]
    assert long == []
