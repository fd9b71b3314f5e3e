"""A BFCL world: the task's classes instantiated from its initial configuration, their
methods called directly with structured arguments (never by evaluating text)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from envs.bfcl.tasks import BfclCall, BfclTask, class_of, is_stateless, public_methods

ERROR_PREFIX = "Error during execution: "
"""How a failed call's result begins, as in BFCL's executor (its checker compares
results as text)."""


class BfclWorld:
    """The state of one episode of a BFCL task."""

    def __init__(self, task: BfclTask) -> None:
        self.instances: dict[str, Any] = {}
        self._functions: dict[str, Callable[..., Any]] = {}
        for name in task.classes:
            instance = class_of(name)()
            if not is_stateless(name):
                config = copy.deepcopy(task.initial_config.get(name, {}))
                instance._load_scenario(config, long_context=task.long_context)
            self.instances[name] = instance
            for function, _ in public_methods(type(instance)):
                self._functions[function] = getattr(instance, function)

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(self._functions)

    def call(self, call: BfclCall) -> str:
        """Run ``call``; its result as BFCL's executor writes it (text as it is, a dict
        as JSON, anything else by ``str``). An unknown function, arguments the method
        does not take, and anything the method raises are an error result, never an
        exception. The method gets its own copy of the arguments (BFCL's methods keep
        and change the lists they are given)."""
        function = self._functions.get(call.name)
        if function is None:
            return f"{ERROR_PREFIX}name {call.name!r} is not defined"
        try:
            result = function(**copy.deepcopy(dict(call.arguments)))
        except Exception as exc:  # a method's own failure is the call's result
            return f"{ERROR_PREFIX}{exc}"
        if isinstance(result, str):
            return result
        if isinstance(result, dict):
            try:
                return json.dumps(result)
            except (TypeError, ValueError):
                return str(result)
        return str(result)

    def state(self) -> dict[str, dict[str, Any]]:
        """Each instance's public attributes: what BFCL's state check compares."""
        return {name: public_state(instance) for name, instance in self.instances.items()}


def public_state(instance: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


def state_differences(
    model: Mapping[str, Any], expected: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Per class, the attributes of ``expected``'s public state that ``model``'s differ in."""
    differences: dict[str, dict[str, Any]] = {}
    for name, instance in expected.items():
        wanted = public_state(instance)
        got = model[name]
        changed = {
            attribute: {"model": getattr(got, attribute, None), "expected": value}
            for attribute, value in wanted.items()
            if getattr(got, attribute, None) != value
        }
        if changed:
            differences[name] = changed
    return differences
