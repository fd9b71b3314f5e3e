"""A round's configuration: everything that decides its data, and the round id derived
from it. Plain pydantic, no Prefect: the round's stages and the benchmarks read it too."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, Field

from contract import GenerationPlan, InvalidInputError, MixTarget, content_hash, default_plan
from flows.settings import DeviceRoute, FlywheelSettings, GateName, GuiAgentName, PolicyName

Share = Annotated[float, Field(ge=0, le=1)]


class RoundConfig(BaseModel):
    """Everything that decides a round's data; its digest is the default round id."""

    tasks: int = Field(ge=1)
    seed: int = Field(ge=0)
    policy: PolicyName
    model: str | None = Field(description="model name when the policy is an LLM")
    teacher_share: float = Field(
        default=0.0, ge=0, le=1, description="share of tasks the scripted teacher collects"
    )
    correct_failures: bool = Field(
        default=False,
        description="the scripted teacher collects again each task the round's policy failed",
    )
    devices: DeviceRoute = Field(
        default="none", description="gui: tasks that need the GUI agent run on the device pool"
    )
    gui_agent: GuiAgentName = Field(
        default="scripted", description="who operates devices: scripted, or llm (gui_model)"
    )
    gui_model: str | None = Field(default=None, description="the llm GUI agent's model name")
    fault_rate: float = Field(ge=0, le=1)
    recovery_rate: float = Field(ge=0, le=1)
    backend_fault_rate: float = Field(ge=0, le=1)
    max_steps: int | None = Field(ge=1, description="the episode's step budget (None: each task's)")
    max_backend_attempts: int = Field(ge=1)
    gate: GateName
    shard_size: int = Field(ge=1)
    plan: GenerationPlan
    """The sandbox's tasks (``bfcl_tasks`` and ``simulated_tasks`` come on top of it)."""
    target: MixTarget
    bfcl_share: Share = Field(
        default=0.0, description="share of the round's tasks taken from BFCL (envs.bfcl)"
    )
    simulated_share: Share = Field(
        default=0.0, description="share of the round's tasks on simulated tools"
    )

    @property
    def bfcl_tasks(self) -> int:
        """How many of the round's tasks come from BFCL."""
        return share_count(self.tasks, self.bfcl_share)

    @property
    def simulated_tasks(self) -> int:
        """How many of the round's tasks are on simulated tools (``envs.simulated``)."""
        return share_count(self.tasks, self.simulated_share)

    def round_id(self) -> str:
        """``round-`` and a digest of the configuration, less every field that has a
        default and is at it. A field added later gets a default that keeps what rounds
        did before it, so the ids of earlier rounds stand without a rule per field; the
        fields every round had are required, and always in the digest."""
        config = self.model_dump(mode="json")
        for name, field in type(self).model_fields.items():
            if not field.is_required() and getattr(self, name) == field.get_default():
                del config[name]
        return "round-" + content_hash(config, 12)

    def teacher_tasks(self, task_ids: Iterable[str]) -> set[str]:
        """Ids of the tasks the scripted teacher collects: ``teacher_share`` of them,
        spread evenly over ``task_ids`` in id order (none with the scripted policy)."""
        if self.policy == "scripted" or not self.teacher_share:
            return set()
        ordered = sorted(task_ids)
        share = self.teacher_share
        return {
            task_id for i, task_id in enumerate(ordered) if int((i + 1) * share) > int(i * share)
        }


def share_count(tasks: int, share: float) -> int:
    """Another backend's part of a round of ``tasks`` at ``share`` (rounded half up);
    the sandbox's plan covers the rest."""
    return int(tasks * share + 0.5)


def sandbox_count(tasks: int, *shares: float) -> int:
    """The sandbox's part of a round of ``tasks`` once the other backends' ``shares``
    are taken; the shares together may not exceed the round."""
    taken = sum(share_count(tasks, share) for share in shares)
    if taken > tasks:
        raise InvalidInputError(
            "simulated_share",
            f"BFCL's and the simulated tools' shares take {taken} of {tasks} tasks",
            ["bfcl_share + simulated_share <= 1"],
        )
    return tasks - taken


def teacher_share_for(share: float, champion_tasks: int | None, tasks: int) -> float:
    """``share``, raised where needed so that the champion collects at most
    ``champion_tasks`` of a round's ``tasks`` (the teacher takes the rest: a weak
    champion's episodes run to the end of their step budget, and cost a turn minutes)."""
    if champion_tasks is None or tasks < 1:
        return share
    wanted = (tasks - min(champion_tasks, tasks)) / tasks
    # a hair above: ``teacher_tasks`` floors ``tasks * share``, which rounding may put below
    return min(1.0, wanted + 1e-9) if wanted > share else share


def resolve_config(
    settings: FlywheelSettings,
    *,
    tasks: int | None = None,
    seed: int | None = None,
    policy: PolicyName | None = None,
    fault_rate: float | None = None,
    backend_fault_rate: float | None = None,
    gate: GateName | None = None,
    plan: GenerationPlan | None = None,
    teacher_share: float | None = None,
    devices: DeviceRoute | None = None,
    bfcl_share: float | None = None,
    simulated_share: float | None = None,
    correct_failures: bool | None = None,
) -> RoundConfig:
    """Settings, with explicit arguments taking precedence; ``plan`` defaults to the even
    mix of the round's sandbox tasks (those BFCL's share leaves)."""
    chosen_policy = policy or settings.round.policy
    n = settings.round.tasks if tasks is None else tasks
    share = settings.round.bfcl_share if bfcl_share is None else bfcl_share
    simulated = settings.round.simulated_share if simulated_share is None else simulated_share
    return RoundConfig(
        tasks=n,
        seed=settings.round.seed if seed is None else seed,
        policy=chosen_policy,
        model=_model_of(chosen_policy, settings),
        teacher_share=settings.round.teacher_share if teacher_share is None else teacher_share,
        # Only a model's failures are corrected: for the scripted policy the setting would
        # change the round's id (and its data's ids) and nothing else.
        correct_failures=chosen_policy != "scripted"
        and (settings.round.correct_failures if correct_failures is None else correct_failures),
        devices=devices or settings.devices.route,
        gui_agent=settings.devices.gui_agent,
        gui_model=(
            settings.devices.gui_model.model
            if settings.devices.gui_agent == "llm" and settings.devices.gui_model
            else None
        ),
        fault_rate=settings.episode.fault_rate if fault_rate is None else fault_rate,
        recovery_rate=settings.episode.recovery_rate,
        backend_fault_rate=(
            settings.round.backend_fault_rate if backend_fault_rate is None else backend_fault_rate
        ),
        max_steps=settings.episode.max_steps,
        max_backend_attempts=settings.retries.backend.attempts,
        gate=gate or settings.round.gate,
        shard_size=settings.round.shard_size,
        plan=plan if plan is not None else default_plan(sandbox_count(n, share, simulated)),
        target=settings.balance.target(),
        bfcl_share=share,
        simulated_share=simulated,
    )


def _model_of(policy: PolicyName, settings: FlywheelSettings) -> str | None:
    """The model an LLM policy collects with: the endpoint's model name, or the registry id
    of the champion the model server serves now."""
    if policy == "openai":
        return settings.policy.model
    if policy == "champion":
        from flows.policies import served_champion

        return served_champion(settings)
    return None
