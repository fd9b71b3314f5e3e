"""The backends a task can name (``InitialConditions.backend``): one to run it on, and
where its tools' specs come from.

A stored task names its backend and its tools; whoever runs it outside a round (RL's
rollouts) or renders its tools for a model (the export) takes them from here, so one
dataset can hold tasks of the sandbox and of BFCL side by side.
"""

from __future__ import annotations

from functools import cache
from typing import Protocol

from contract import InvalidInputError, TaskSpec, ToolSpec
from envs.backend import Backend


class ToolSource(Protocol):
    """The specs of one backend's tools by name, and the sub-agents it offers."""

    def tool_spec(self, name: str) -> ToolSpec: ...

    def subagent_specs(self) -> tuple[ToolSpec, ...]: ...


class BfclTools:
    """BFCL's functions (``envs.bfcl``) by name: no sub-agents."""

    def __init__(self) -> None:
        from envs.bfcl.backend import tool_spec
        from envs.bfcl.tasks import CLASSES, class_docs

        self._specs = {
            d["name"]: tool_spec(d, owner) for owner in CLASSES for d in class_docs(owner)
        }

    def tool_spec(self, name: str) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise InvalidInputError("tool", f"BFCL has no function {name!r}", sorted(self._specs))
        return spec

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        return ()


SOURCES = ("sandbox", "device", "bfcl")
"""The backends a task can name (``InitialConditions.backend``)."""


@cache
def tool_source(backend: str) -> ToolSource:
    """The tool source of ``backend`` (a device runs the sandbox's apps), built once."""
    if backend == "bfcl":
        return BfclTools()
    if backend in ("sandbox", "device"):
        from envs.sandbox import MobileSandbox

        return MobileSandbox()
    raise InvalidInputError("backend", f"unknown backend {backend!r}", SOURCES)


def tools_of(task: TaskSpec) -> ToolSource:
    """The tool source of ``task``'s backend."""
    return tool_source(task.initial_conditions.backend)


class Backends:
    """One backend per kind, made when a task first needs it and kept (the sandbox's
    cache of seeded worlds stays warm across episodes)."""

    def __init__(self) -> None:
        self._made: dict[str, Backend] = {}

    def for_task(self, task: TaskSpec) -> Backend:
        kind = task.initial_conditions.backend
        backend = self._made.get(kind)
        if backend is None:
            backend = self._made[kind] = _fresh(kind)
        return backend


def _fresh(kind: str) -> Backend:
    if kind == "bfcl":
        from envs.bfcl.backend import BfclBackend

        return BfclBackend()
    if kind in ("sandbox", "device"):
        from envs.sandbox import MobileSandbox

        return MobileSandbox()
    raise InvalidInputError("backend", f"unknown backend {kind!r}", SOURCES)
