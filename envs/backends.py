"""The backends a task can name (``InitialConditions.backend``): one to run it on, and
where its tools' specs come from.

A stored task names its backend and its tools; whoever runs it outside a round (RL's
rollouts) or renders its tools for a model (the export) takes them from here, so one
dataset can hold tasks of the sandbox, of BFCL and on simulated tools side by side.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Protocol

from contract import InvalidInputError, TaskSpec, ToolSpec
from envs.backend import Backend

if TYPE_CHECKING:
    from envs.simulated import Simulator


class ToolSource(Protocol):
    """The specs of one backend's tools by name, and the sub-agents it offers."""

    def tool_spec(self, name: str) -> ToolSpec: ...

    def subagent_specs(self) -> tuple[ToolSpec, ...]: ...


class NamedTools:
    """A fixed set of tools by name (BFCL's functions, the long-tail tools): no
    sub-agents."""

    def __init__(self, owner: str, specs: Iterable[ToolSpec]) -> None:
        self._owner = owner
        self._specs = {spec.name: spec for spec in specs}

    def tool_spec(self, name: str) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise InvalidInputError(
                "tool", f"{self._owner} has no function {name!r}", sorted(self._specs)
            )
        return spec

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        return ()


def _bfcl_tools() -> NamedTools:
    from envs.bfcl.backend import tool_spec
    from envs.bfcl.tasks import CLASSES, class_docs

    return NamedTools("BFCL", (tool_spec(d, owner) for owner in CLASSES for d in class_docs(owner)))


SOURCES = ("sandbox", "device", "bfcl", "simulated")
"""The backends a task can name (``InitialConditions.backend``)."""


@cache
def tool_source(backend: str) -> ToolSource:
    """The tool source of ``backend`` (a device runs the sandbox's apps), built once."""
    if backend == "bfcl":
        return _bfcl_tools()
    if backend == "simulated":
        from envs.simulated_catalog import TOOLS

        return NamedTools("the simulated apps", TOOLS)
    if backend in ("sandbox", "device"):
        from envs.sandbox import MobileSandbox

        return MobileSandbox()
    raise InvalidInputError("backend", f"unknown backend {backend!r}", SOURCES)


def tools_of(task: TaskSpec) -> ToolSource:
    """The tool source of ``task``'s backend."""
    return tool_source(task.initial_conditions.backend)


def arriving_specs(
    arriving_tools: Sequence[Sequence[str]], source: ToolSource
) -> tuple[tuple[ToolSpec, ...], ...]:
    """The specs of the tools that arrive with each follow-up (a task's
    ``arriving_tools``)."""
    return tuple(tuple(source.tool_spec(n) for n in names) for names in arriving_tools)


class Backends:
    """One backend per kind, made when a task first needs it and kept (the sandbox's
    cache of seeded worlds stays warm across episodes); tasks on simulated tools need
    ``simulator``."""

    def __init__(self, simulator: Simulator | None = None) -> None:
        self._made: dict[str, Backend] = {}
        self._simulator = simulator

    def for_task(self, task: TaskSpec) -> Backend:
        kind = task.initial_conditions.backend
        backend = self._made.get(kind)
        if backend is None:
            backend = self._made[kind] = self._fresh(kind)
        return backend

    def _fresh(self, kind: str) -> Backend:
        if kind == "simulated":
            if self._simulator is None:
                raise InvalidInputError(
                    "backend", "a task on simulated tools needs a simulator to run on"
                )
            from envs.simulated import SimulatedBackend
            from envs.simulated_catalog import TOOLS

            return SimulatedBackend(self._simulator, TOOLS)
        return _fresh(kind)


def _fresh(kind: str) -> Backend:
    if kind == "bfcl":
        from envs.bfcl.backend import BfclBackend

        return BfclBackend()
    if kind in ("sandbox", "device"):
        from envs.sandbox import MobileSandbox

        return MobileSandbox()
    raise InvalidInputError("backend", f"unknown backend {kind!r}", SOURCES)
