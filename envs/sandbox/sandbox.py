"""The mobile sandbox: an in-process phone, deterministic and resettable from a seed."""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import JsonValue

from contract import (
    Action,
    ErrorKind,
    Feedback,
    InitialConditions,
    InvalidInputError,
    MemoryRead,
    MemorySearch,
    MemoryWrite,
    SkillLoad,
    SubAgentCall,
    TaskSpec,
    ToolCall,
    ToolSpec,
)
from envs.backend import PrivilegedEvidence
from envs.sandbox import harness
from envs.sandbox.app import App, SandboxTool
from envs.sandbox.apps import ALL_APPS
from envs.sandbox.state import Collections, ToolContext, ToolFailure, writable
from envs.sandbox.subagents import SUBAGENTS, seed_subagents
from envs.screen import render_gui_world

HARNESS_LATENCY_MS = 5.0
WORLD_CACHE_SIZE = 64
"""Pristine worlds kept per seed: G rollouts of one task reset from a copy, not a rebuild."""
SUBAGENT_LATENCY_MS = 900.0


class SeedStream(random.Random):
    """A seeded stream that draws integers with one multiply instead of rejection sampling.

    World generation makes hundreds of draws per reset; this makes it about twice as fast.
    The bias is below 2**-40 for the small ranges seeders use.
    """

    def _randbelow(self, n: int) -> int:
        return int(self.random() * n)


class MobileSandbox:
    """Typed tools over structured app databases, verified by state.

    ``backend_fault_rate`` makes that share of tool and sub-agent calls fail with a backend
    error or a timeout (seeded by task seed and ``device``), so that collectors and curation
    see the faults a real device has, and a retry on another device meets different faults.
    A sub-agent works the same device (the GUI agent its screens), so it meets them too.
    """

    name = "sandbox"

    def __init__(
        self,
        apps: Iterable[App] = ALL_APPS,
        backend_fault_rate: float = 0.0,
        device: str = "sandbox-0",
    ) -> None:
        if not 0.0 <= backend_fault_rate <= 1.0:
            raise InvalidInputError("backend_fault_rate", "must be within [0, 1]")
        self.device = device
        self._apps = tuple(apps)
        self._tools: dict[str, SandboxTool] = {}
        for app in self._apps:
            for name, tool in app.tools.items():
                if name in self._tools:
                    raise ValueError(f"tool {name!r} is defined by two apps")
                self._tools[name] = tool
        self._fault_rate = backend_fault_rate
        self._state: Collections = {}
        self._initial: Collections = {}
        self._owned: set[str] = set()
        self._counters: dict[str, int] = {}
        self._available: dict[str, SandboxTool] = {}
        self._faults = random.Random(0)
        self._worlds: OrderedDict[int, Collections] = OrderedDict()
        self._shows_screen = False
        self._rehearsals: MobileSandbox | None = None
        self._dispatch: dict[str, Callable[[Any], Feedback]] = {
            "tool_call": self._tool_call,
            "memory_read": self._memory_read,
            "memory_write": self._memory_write,
            "memory_search": self._memory_search,
            "skill_load": self._skill_load,
            "subagent_call": self._subagent_call,
        }

    # -- catalogue ---------------------------------------------------------------------

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(app.domain for app in self._apps)

    def all_tool_specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self._tools.values())

    def tool_spec(self, name: str) -> ToolSpec:
        tool = self._tools.get(name)
        if tool is None:
            raise InvalidInputError("tool", f"unknown tool {name!r}", sorted(self._tools))
        return tool.spec

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        return tuple(agent.spec for agent in SUBAGENTS.values())

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self._available.values())

    # -- episode lifecycle -------------------------------------------------------------

    def build_world(self, seed: int) -> Collections:
        """The seeded state before any task patch: a new mapping whose collections are
        the cached world's own, to read (copy a collection before changing it)."""
        world = self._worlds.get(seed)
        if world is None:
            world = self._generate_world(seed)
            self._worlds[seed] = world
            if len(self._worlds) > WORLD_CACHE_SIZE:
                self._worlds.popitem(last=False)
        else:
            self._worlds.move_to_end(seed)
        return dict(world)

    def _generate_world(self, seed: int) -> Collections:
        """Each app draws from its own stream, so adding an app changes no other app."""
        state: Collections = {}
        for app in self._apps:
            rng = SeedStream(f"{seed}:{app.domain}")
            for seeder in app.seeders:
                seeder(state, rng)
        harness.seed_harness(state, SeedStream(f"{seed}:harness"))
        seed_subagents(state, SeedStream(f"{seed}:subagents"))
        return state

    def reset(self, task: TaskSpec) -> None:
        self.reset_to(task.initial_conditions, task.tools)
        self._shows_screen = any(c.kind == "ui_state" for c in task.verifier.checks)

    def reset_to(self, conditions: InitialConditions, tools: Iterable[str]) -> None:
        """A fresh episode from ``conditions``, copied on write: the state, its initial
        snapshot and the world cache share every collection until a patch or a handler
        writes to it (rows are never changed in place, see ``ToolContext``)."""
        state = self.build_world(conditions.seed)
        patched: set[str] = set()  # the collections copied for the patches
        for patch in conditions.setup:
            if patch.collection not in state:
                raise InvalidInputError(
                    "initial_conditions.setup.collection",
                    f"unknown collection {patch.collection!r}",
                    sorted(state),
                )
            row_id = patch.row.get("id")
            if not isinstance(row_id, str):
                raise InvalidInputError("initial_conditions.setup.row.id", "must be a string")
            writable(state, patched, patch.collection)[row_id] = dict(patch.row)
        self._available = {}
        for name in tools:
            if name not in self._tools:
                raise InvalidInputError("tools", f"unknown tool {name!r}", sorted(self._tools))
            self._available[name] = self._tools[name]
        self._state = state
        self._initial = dict(state)
        self._owned = set()
        self._shows_screen = False
        self._counters = {}
        self._faults = random.Random(f"{conditions.seed}:{self.device}:faults")

    def evidence(self) -> PrivilegedEvidence:
        """The states; with the GUI world rendered as a screen for ``ui_state`` checks."""
        screen = render_gui_world(self._state) if self._shows_screen else None
        return PrivilegedEvidence(initial=self._initial, final=self._state, screen=screen)

    def state(self) -> Collections:
        """The live privileged state (for verifiers and tests; never for policies)."""
        return self._state

    def rehearse(
        self, conditions: InitialConditions, tools: Iterable[str], plan: Iterable[Action]
    ) -> PrivilegedEvidence:
        """Run ``plan`` from ``conditions`` without faults, on a twin that shares this
        sandbox's world cache: an episode in progress here is left as it is."""
        if self._rehearsals is None:
            self._rehearsals = MobileSandbox(self._apps, device=f"{self.device}:rehearsal")
            self._rehearsals._worlds = self._worlds
        twin = self._rehearsals
        twin.reset_to(conditions, tools)
        for action in plan:
            twin.execute(action)
        return PrivilegedEvidence(initial=twin._initial, final=twin._state)

    # -- actions -----------------------------------------------------------------------

    def execute(self, action: Action) -> Feedback:
        handler = self._dispatch.get(action.kind)
        if handler is None:  # clarify, refuse, finish: the runner ends the episode
            return Feedback()
        return handler(action)

    def _tool_call(self, action: ToolCall) -> Feedback:
        tool = self._available.get(action.tool)
        if tool is None:
            offered = ", ".join(self._available) or "none"
            why = "is not offered for this task" if action.tool in self._tools else "does not exist"
            return Feedback.failure(
                ErrorKind.UNKNOWN_TOOL, f"tool {action.tool!r} {why} (available: {offered})"
            )
        fault = self._fault(f"{action.tool}: the app did not respond")
        if fault is not None:
            return fault
        return self._run(tool.check, tool.handler, action.arguments, tool.latency_ms)

    def _fault(self, message: str) -> Feedback | None:
        """A backend error or a timeout, ``backend_fault_rate`` of the time; else None."""
        if not (self._fault_rate and self._faults.random() < self._fault_rate):
            return None
        kind = self._faults.choice((ErrorKind.BACKEND_ERROR, ErrorKind.TIMEOUT))
        return Feedback.failure(kind, message, latency_ms=5000.0)

    def _run(
        self,
        check: Callable[[Any, str], tuple[str, str] | None],
        handler: Callable[[ToolContext, dict[str, Any]], JsonValue],
        arguments: dict[str, Any],
        latency_ms: float,
    ) -> Feedback:
        problem = check(arguments, "")
        if problem is not None:
            field, message = problem
            return Feedback.failure(
                ErrorKind.INVALID_ARGUMENTS, f"{field}: {message}", field=field, latency_ms=1.0
            )
        ctx = ToolContext(self._state, self._counters, self._owned)
        try:
            result = handler(ctx, arguments)
        except ToolFailure as failure:
            return Feedback.failure(failure.kind, failure.message, failure.field, latency_ms)
        except Exception as exc:  # a bug in a simulated app must not end the episode
            return Feedback.failure(
                ErrorKind.BACKEND_ERROR, f"internal error: {type(exc).__name__}: {exc}"
            )
        # Handlers return plain JSON built from the state; skipping re-validation of large
        # results keeps a call in microseconds (tests validate every tool's results).
        return Feedback.model_construct(
            result=result,
            state_changes=tuple(ctx.changes),
            error=None,
            latency_ms=latency_ms,
            cost=0.0,
        )

    def _harness(self, fn: Callable[[ToolContext], JsonValue]) -> Feedback:
        ctx = ToolContext(self._state, self._counters, self._owned)
        try:
            result = fn(ctx)
        except ToolFailure as failure:
            return Feedback.failure(
                failure.kind, failure.message, failure.field, HARNESS_LATENCY_MS
            )
        return Feedback(
            result=result, state_changes=tuple(ctx.changes), latency_ms=HARNESS_LATENCY_MS
        )

    def _memory_read(self, action: MemoryRead) -> Feedback:
        return self._harness(lambda ctx: harness.memory_read(ctx, action.key))

    def _memory_write(self, action: MemoryWrite) -> Feedback:
        return self._harness(lambda ctx: harness.memory_write(ctx, action.key, action.value))

    def _memory_search(self, action: MemorySearch) -> Feedback:
        return self._harness(lambda ctx: harness.memory_search(ctx, action.query))

    def _skill_load(self, action: SkillLoad) -> Feedback:
        return self._harness(lambda ctx: harness.skill_load(ctx, action.name))

    def _subagent_call(self, action: SubAgentCall) -> Feedback:
        agent = SUBAGENTS.get(action.agent)
        if agent is None:
            return Feedback.failure(
                ErrorKind.UNKNOWN_TOOL,
                f"no sub-agent named {action.agent!r} (available: {', '.join(SUBAGENTS)})",
                field="agent",
            )
        fault = self._fault(f"the {action.agent} agent: the device did not respond")
        if fault is not None:
            return fault
        return self._run(agent.check, agent.handler, action.arguments, SUBAGENT_LATENCY_MS)
