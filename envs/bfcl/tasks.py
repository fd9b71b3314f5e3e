"""BFCL's multi-turn tasks, read from the installed ``bfcl-eval`` package's data.

A task is a conversation of user turns over a world of BFCL's stateful classes (a file
system, messaging, travel booking, vehicle control, trading, ticketing, posting, math),
with the ground-truth calls of every turn. Ground-truth calls are stored by BFCL as Python
call text (``mv(source='a.txt', destination='temp')``); they are read here with ``ast``
(literals only, never evaluated) and bound to the method's parameters, so a call is a
name and a mapping of arguments like any call of ours.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

from contract import InvalidInputError, Split

CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
"""BFCL's multi-turn categories, 200 tasks each: ``miss_func`` holds a function back
until a later turn, ``miss_param`` leaves a parameter out of a turn's request (a turn
that should be answered by asking, with no call)."""
SUITE = "bfcl-multi-turn"
"""The evaluation suite of those categories (``training.bfcl_suite``)."""
SPLITS = ("dev", "train", "all")
"""Which of BFCL's tasks the suite runs (``split_of``; ``all``: both)."""
DEV_EVERY = 5
"""One task in five of each category is held out (those whose number is a multiple)."""
CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)
"""The executable classes the multi-turn categories use. BFCL's memory and web-search
classes (other categories) are left out: they need sentence-transformers, faiss and the
network."""
_PACKAGE = "bfcl_eval"


@dataclass(frozen=True)
class BfclCall:
    """A call of one of a world's functions, with its arguments by parameter name."""

    name: str
    arguments: Mapping[str, Any]

    def as_bfcl_text(self) -> str:
        """The call as BFCL writes one (``mv(source='a', destination='b')``)."""
        shown = ", ".join(f"{key}={value!r}" for key, value in self.arguments.items())
        return f"{self.name}({shown})"


@dataclass(frozen=True)
class BfclTask:
    id: str
    category: str
    turns: tuple[tuple[str, ...], ...]
    """The user's messages of each turn; a turn of ``miss_func`` may have none (the
    held-back function arrives then)."""
    initial_config: Mapping[str, Any]
    classes: tuple[str, ...]
    excluded: tuple[str, ...]
    """Functions of the involved classes the task does not offer."""
    held_back: Mapping[int, tuple[str, ...]]
    """Functions offered only from the given turn on (``miss_func``)."""
    ground_truth: tuple[tuple[BfclCall, ...], ...]
    """The calls of each turn; none for a turn that should be answered without one."""

    @property
    def long_context(self) -> bool:
        """Whether the classes load their scenario with BFCL's long-context padding."""
        return self.category == "long_context"


def class_of(name: str) -> type:
    """The executable BFCL class ``name`` (``CLASSES``), as BFCL's executor finds it."""
    _known(name)
    module = importlib.import_module(CLASS_FILE_PATH_MAPPING[name])
    return getattr(module, name)  # type: ignore[no-any-return]


def is_stateless(name: str) -> bool:
    """Whether BFCL's class ``name`` takes no scenario (math)."""
    return name in STATELESS_CLASSES


def public_methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """The functions a class offers: its public methods, as BFCL finds them."""
    for name, member in inspect.getmembers(cls, predicate=inspect.isfunction):
        if not name.startswith("_"):
            yield name, member


@cache
def load_tasks(category: str) -> tuple[BfclTask, ...]:
    """Every task of a multi-turn ``category`` (``CATEGORIES``), in BFCL's order."""
    if category not in CATEGORIES:
        raise InvalidInputError("category", f"unknown value {category!r}", CATEGORIES)
    entries = _json_lines(f"BFCL_v4_multi_turn_{category}.json")
    answers = {
        a["id"]: a["ground_truth"]
        for a in _json_lines(f"possible_answer/BFCL_v4_multi_turn_{category}.json")
    }
    return tuple(_task(entry, answers[entry["id"]], category) for entry in entries)


def split_of(task: BfclTask) -> Split:
    """The split a BFCL task belongs to, by the number that ends its id: the development
    split is held out of every round (``envs.bfcl.construct``)."""
    number = int(task.id.rsplit("_", 1)[1])
    return Split.DEV if number % DEV_EVERY == 0 else Split.TRAIN


def task_by_id(task_id: str) -> BfclTask:
    """The BFCL task ``task_id`` (``multi_turn_base_12``)."""
    category, _, number = task_id.removeprefix("multi_turn_").rpartition("_")
    if category not in CATEGORIES or not number.isdigit():
        raise InvalidInputError("task", f"{task_id!r} is not a BFCL multi-turn task id")
    found = next((t for t in load_tasks(category) if t.id == task_id), None)
    if found is None:
        raise InvalidInputError("task", f"BFCL has no task {task_id!r}")
    return found


def function_docs(classes: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """BFCL's function documents of ``classes``, in their order."""
    return tuple(doc for name in classes for doc in class_docs(name))


@cache
def class_docs(name: str) -> tuple[dict[str, Any], ...]:
    """BFCL's function documents of its class ``name``, read once."""
    _known(name)
    return tuple(_json_lines(f"multi_turn_func_doc/{MULTI_TURN_FUNC_DOC_FILE_MAPPING[name]}"))


def _known(name: str) -> None:
    if name not in CLASSES:
        raise InvalidInputError("class", f"unknown BFCL class {name!r}", CLASSES)


def parse_call(text: str, methods: Mapping[str, Callable[..., Any]]) -> BfclCall:
    """A BFCL call text as a call, its positional arguments bound to the method's
    parameter names. Only literal arguments are read; anything else is an
    ``InvalidInputError`` naming the call."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise InvalidInputError("call", f"{text!r} is not a call: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise InvalidInputError("call", f"{text!r} is not a call of a function by name")
    name = node.func.id
    if name not in methods:
        raise InvalidInputError("call", f"{text!r} calls an unknown function", sorted(methods))
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except ValueError:
        raise InvalidInputError("call", f"{text!r} has an argument that is not a literal") from None
    signature = inspect.signature(methods[name])
    try:
        bound = signature.bind(None, *args, **kwargs)  # None: the instance
    except TypeError as exc:
        raise InvalidInputError("call", f"{text!r}: {exc}") from None
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(signature.parameters)))
    return BfclCall(name, arguments)


def _task(entry: Mapping[str, Any], answer: list[list[str]], category: str) -> BfclTask:
    classes = tuple(entry["involved_classes"])
    methods = _methods(classes)
    return BfclTask(
        id=entry["id"],
        category=category,
        turns=tuple(tuple(m["content"] for m in turn) for turn in entry["question"]),
        initial_config=entry["initial_config"],
        classes=classes,
        excluded=tuple(entry.get("excluded_function", ())),
        held_back={int(k): tuple(v) for k, v in entry.get("missed_function", {}).items()},
        ground_truth=tuple(tuple(parse_call(c, methods) for c in turn) for turn in answer),
    )


@cache
def _methods(classes: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """Method by function name over ``classes``; a later class's method wins a shared
    name, as in BFCL's executor."""
    methods: dict[str, Callable[..., Any]] = {}
    for name in classes:
        methods.update(public_methods(class_of(name)))
    return methods


def _json_lines(path: str) -> list[dict[str, Any]]:
    text = resources.files(_PACKAGE).joinpath("data", *path.split("/")).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
