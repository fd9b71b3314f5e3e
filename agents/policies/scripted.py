"""The scripted reference policy: replays a task's reference plan, with injected faults.

Faults make the default data carry the failures curation must catch. Each episode gets
at most one fault, with probability ``rate``; its kind is drawn by ``weights``. After a
fault the policy recovers (goes back to the correct action) with ``recovery_rate``, which
yields the verified recovery trajectories training wants.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agents.policies.base import Decision, TaskView
from agents.policies.perturb import FREE_ARGUMENTS, perturb
from contract import (
    TERMINAL_KINDS,
    Action,
    FaultKind,
    Finish,
    InvalidInputError,
    MemoryRead,
    PolicyInfo,
    SkillLoad,
    Step,
    SubAgentCall,
    TaskSpec,
    ToolCall,
    ToolSpec,
)

SCRIPTED_VERSION = "1"
LOOP_REPEATS = 4


@dataclass(frozen=True)
class FaultConfig:
    rate: float = 0.0
    weights: Mapping[FaultKind, float] = field(
        default_factory=lambda: dict.fromkeys(FaultKind, 1.0)
    )
    recovery_rate: float = 0.5

    def __post_init__(self) -> None:
        for name, value in (("fault_rate", self.rate), ("recovery_rate", self.recovery_rate)):
            if not 0.0 <= value <= 1.0:
                raise InvalidInputError(name, f"{value} is outside [0, 1]")
        if any(w < 0 for w in self.weights.values()) or not any(self.weights.values()):
            raise InvalidInputError("fault weights", "need non-negative weights, one positive")


Scripted = list[tuple[Action, FaultKind | None]]


class ScriptedPolicy:
    """Replays reference plans; ``faults`` decides what goes wrong and how often."""

    def __init__(self, faults: FaultConfig | None = None) -> None:
        self.faults = faults or FaultConfig()

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name="scripted", version=SCRIPTED_VERSION)

    def start(self, task: TaskSpec, view: TaskView) -> ScriptedSession:
        rng = random.Random(f"{task.id}:scripted")
        script: Scripted = [(a, None) for a in task.reference_plan]
        if script[-1][0].kind not in TERMINAL_KINDS:
            script.append((Finish(answer="Done."), None))
        if rng.random() < self.faults.rate:
            kinds = [k for k, w in self.faults.weights.items() if w > 0]
            kind = rng.choices(kinds, weights=[self.faults.weights[k] for k in kinds])[0]
            recover = rng.random() < self.faults.recovery_rate
            specs = {t.name: t for t in view.tools} | {s.name: s for s in view.subagents}
            script = inject_fault(script, kind, recover, rng, specs, view.max_steps)
        return ScriptedSession(script)


class ScriptedSession:
    def __init__(self, script: Scripted) -> None:
        self._script = script
        self._next = 0

    def act(self, history: Sequence[Step]) -> Decision:
        if self._next >= len(self._script):
            action: Action = Finish(answer="Done.")
            fault = None
        else:
            action, fault = self._script[self._next]
            self._next += 1
        return Decision(action=action, model_output=action.describe(), injected_fault=fault)


def inject_fault(
    script: Scripted,
    kind: FaultKind,
    recover: bool,
    rng: random.Random,
    specs: Mapping[str, ToolSpec],
    max_steps: int,
) -> Scripted:
    """The script with one fault of ``kind`` injected (unchanged if none can be placed)."""
    body = [i for i, (a, _) in enumerate(script) if a.kind not in TERMINAL_KINDS]
    if not body:
        return script
    if kind is FaultKind.WRONG_ARGUMENT:
        spots = [i for i in body if _wrong(script[i][0], specs, rng) is not None]
        if not spots:
            return script
        i = rng.choice(spots)
        wrong = _wrong(script[i][0], specs, rng)
        assert wrong is not None
        fixed = [script[i]] if recover else []
        return [*script[:i], (wrong, kind), *fixed, *script[i + 1 :]]
    i = rng.choice(body)
    action = script[i][0]
    if kind is FaultKind.SKIPPED_STEP:  # the action taken in the skipped one's place
        return [*script[:i], (script[i + 1][0], kind), *script[i + 2 :]]
    if kind is FaultKind.PREMATURE_FINISH:
        return [*script[:i], (Finish(answer="Done."), kind)]
    if kind is FaultKind.REDUNDANT_CALL:
        return [*script[: i + 1], (action, kind), *script[i + 1 :]]
    if kind is FaultKind.LOOPING_CALL:
        if recover:
            return [*script[: i + 1], *[(action, kind)] * LOOP_REPEATS, *script[i + 1 :]]
        return [*script[: i + 1], *[(action, kind)] * max_steps]
    # INVALID_TOOL: a hallucinated tool name in place of the right one
    name = action.target if isinstance(action, ToolCall) else action.kind
    invalid = ToolCall(tool=f"{name}_v2", arguments=getattr(action, "arguments", {}))
    rest = script[i:] if recover else script[i + 1 :]
    return [*script[:i], (invalid, kind), *rest]


def _wrong(action: Action, specs: Mapping[str, ToolSpec], rng: random.Random) -> Action | None:
    if isinstance(action, ToolCall | SubAgentCall):
        names = [n for n in action.arguments if n not in FREE_ARGUMENTS]
        if not names:
            return None
        name = names[rng.randrange(len(names))]
        spec = specs.get(action.tool if isinstance(action, ToolCall) else action.agent)
        schema = spec.parameters.get("properties", {}).get(name) if spec else None
        args = {**action.arguments, name: perturb(action.arguments[name], schema)}
        return action.model_copy(update={"arguments": args})
    if isinstance(action, MemoryRead):
        return MemoryRead(key=f"{action.key}_old")
    if isinstance(action, SkillLoad):
        return SkillLoad(name=f"{action.name}_v1")
    return None
