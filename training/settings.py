"""What a training run is asked to do: the trainer's request and its hyperparameters.

Plain pydantic records with no torch import, so the CLI and the Prefect form refuse a bad
value (``sft.learning_rate``, ``rl.group_size``, ``base``) in a fraction of a second,
before any model loads. A base model is ``tiny`` (built here: ``training/base_model.py``)
or a local Hugging Face model directory, checked for its configuration and tokenizer
files without loading weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from contract import (
    DATASET_ID,
    DEFAULT_DEV_TASKS,
    DEFAULT_MAX_STEPS,
    InvalidInputError,
    TaskSpec,
    TrainingMethod,
    step_budget,
)
from contract.validation import invalid_input
from training.care import Budget, CareConfig
from training.hyperparameters import Hyperparameters

TINY = "tiny"
"""The default base model: a tiny Qwen2 built from a configuration, its tokenizer trained
on the exported conversations."""
NANO = "nano"
"""The CPU base that learns: a small Llama with a compact chat template (``base_model``)."""
BUILT_BASES = (TINY, NANO)
ALLOWED_BASES = (*BUILT_BASES, "a local model directory")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
BUILT_FROM = "flywheel_base"
"""The key of a saved model's ``config.json`` naming the built base it descends from, so
that a run continuing from it (the loop's champion) gets that base's defaults."""


class Schedule(StrEnum):
    """How the learning rate moves after its warmup."""

    LINEAR = "linear"
    """falls linearly to 0 at the last step"""
    CONSTANT = "constant"
    """stays at its peak"""


class SftSettings(Hyperparameters):
    """The hyperparameters of an SFT run. A value out of range is an ``InvalidInputError``
    naming the field (``sft.learning_rate``) and its range."""

    root: ClassVar[str] = "sft"

    max_steps: int = Field(default=30, ge=1, le=100_000, description="optimizer steps")
    learning_rate: float = Field(default=1e-3, gt=0, le=1, description="peak learning rate")
    batch_size: int = Field(default=4, ge=1, le=512, description="rows per optimizer step")
    max_length: int = Field(
        default=4096,
        ge=32,
        le=32_768,
        description="tokens kept of a row (its start); the sandbox's system turn with its "
        "tool schemas alone is about 2,000 tokens of the tiny model's tokenizer",
    )
    epochs: float | None = Field(
        default=None, gt=0, le=1000, description="passes over the rows; set: max_steps is unused"
    )
    step_cap: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="with epochs: at most this many optimizer steps, however many rows "
        "there are (a turn of the loop keeps its length as versions grow); unset: no cap",
    )
    warmup: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="share of the steps over which the learning rate rises from 0 to its peak",
    )
    schedule: Schedule = Field(
        default=Schedule.LINEAR,
        description="after the warmup, 'linear' (falls to 0) or 'constant' (stays at the peak: "
        "a small model from scratch learns to copy values late in a run, and a falling rate "
        "can stop it first: README, 'The nano base')",
    )
    swap_share: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of the rows whose copied values are swapped for others of their "
        "kind, anew in every pass (training/value_swap.py): teaches a model from scratch to "
        "copy rather than to recall",
    )
    replay_share: float = Field(
        default=0.3,
        ge=0.0,
        le=1.0,
        description="continuing from a registered model: the share of rows trained that "
        "its own version held (the rest are the rows added since)",
    )
    weighted: bool = Field(
        default=True,
        description="draw rows in proportion to their sampling weight (the balancer's, towards "
        "the version's target mix), with replacement; false, or rows without one: every row "
        "equally often",
    )
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="seed of shuffling and dropout")
    logging_steps: int = Field(default=1, ge=1, le=100_000, description="steps between log points")


class RlSettings(Hyperparameters):
    """Online RL hyperparameters; every bound is checked and named (``rl.<field>``)."""

    root: ClassVar[str] = "rl"

    updates: int = Field(default=8, ge=1, le=1_000_000, description="optimizer updates")
    group_size: int = Field(default=4, ge=2, le=64, description="rollouts per task (G)")
    tasks_per_update: int = Field(default=2, ge=1, le=1024, description="tasks per update")
    iterations: int = Field(
        default=1, ge=1, le=16, description="gradient passes over one batch of rollouts"
    )
    learning_rate: float = Field(default=1e-4, gt=0.0, le=1.0)
    epsilon_low: float = Field(default=0.2, gt=0.0, lt=1.0, description="clip below 1 - e")
    epsilon_high: float = Field(default=0.28, gt=0.0, lt=1.0, description="clip above 1 + e")
    temperature: float = Field(default=1.0, gt=0.0, le=2.0, description="sampling temperature")
    resamples: int = Field(
        default=1,
        ge=0,
        le=16,
        description="times a group whose rewards are all equal is replaced by another "
        "task's (dynamic sampling); 0: such groups stay, with zero advantages",
    )
    weighted: bool = Field(
        default=True,
        description="draw tasks in proportion to the summed sampling weight of their rows "
        "(the balancer's, towards the version's target mix), with replacement; false, or "
        "rows without one: every task equally often",
    )
    probe_tasks: int = Field(
        default=8,
        ge=0,
        le=1024,
        description="RL tasks the starting checkpoint runs greedily first: RL is skipped "
        "when it neither solves nor progresses on any; 0: no probe",
    )
    max_new_tokens: int = Field(default=96, ge=1, le=16_384, description="tokens per reply")
    max_steps: int | None = Field(
        default=None,
        ge=1,
        le=200,
        description="one step budget for every episode; default: the budget each task records",
    )
    max_context: int = Field(
        default=8192,
        ge=64,
        le=1_048_576,
        description="the longest context a reply may end at (the model's own is the bound "
        "when smaller): past it the episode's reply is empty, finish reason length",
    )
    token_budget: int | None = Field(
        default=None,
        ge=1,
        description="output tokens an episode may spend (e_i's scale); "
        "default max_new_tokens * the episode's step budget",
    )
    p_low: float = Field(default=CareConfig.p_low, ge=0.0, le=1.0)
    p_high: float = Field(default=CareConfig.p_high, ge=0.0, le=1.0)
    lambda_prog: float = Field(default=CareConfig.lambda_prog, ge=0.0, le=10.0)
    lambda_eff: float = Field(default=CareConfig.lambda_eff, ge=0.0, le=10.0)
    token_weight: float = Field(default=CareConfig.token_weight, ge=0.0, le=1.0)
    schedule_every: int = Field(
        default=0, ge=0, description="updates between schedule moves; 0: no schedule"
    )
    seed: int = 0

    @model_validator(mode="after")
    def _ordered(self) -> RlSettings:
        if self.p_low >= self.p_high:
            raise ValueError(f"p_low {self.p_low} must be below p_high {self.p_high}")
        return self

    @property
    def care(self) -> CareConfig:
        return CareConfig(
            p_low=self.p_low,
            p_high=self.p_high,
            lambda_prog=self.lambda_prog,
            lambda_eff=self.lambda_eff,
            token_weight=self.token_weight,
        )

    def steps_for(self, task: TaskSpec | None) -> int:
        """The step budget of an episode of ``task``: the task's own unless overridden
        (``DEFAULT_MAX_STEPS`` for no task)."""
        if task is None:
            return self.max_steps or DEFAULT_MAX_STEPS
        return step_budget(task, self.max_steps)

    def budget_for(self, task: TaskSpec | None) -> Budget:
        """CARE's cost budget of an episode of ``task``: its steps, their reply tokens."""
        steps = self.steps_for(task)
        tokens = self.token_budget or self.max_new_tokens * steps
        return Budget(output_tokens=tokens, tool_calls=steps)


BASE_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    NANO: {
        "sft": {
            "epochs": 8.0,
            "step_cap": 1000,
            "learning_rate": 3e-3,
            "batch_size": 8,
            "warmup": 0.05,
            "swap_share": 0.5,
            "max_length": 2048,
        },
        "rl": {"max_new_tokens": 64},
    },
}
"""What a built base trains with where a request leaves a field unset: nano learns in
minutes on a CPU with these and not with the generic defaults (README, "The nano
base", gives the measurements they were chosen by)."""

CONTINUED_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    NANO: {"sft": {"epochs": 4.0, "step_cap": 600, "learning_rate": 1e-3, "replay_share": 0.5}},
}
"""Where a model trained from a built base continues (the loop's later turns), these
replace that base's defaults: it starts from learned weights, and a later turn's round
(the champion collecting) leaves its 30 minutes less room than the first's. A third of
the recipe's rate: at the recipe's own, a continuation of the 1,000-step champion lost
0.05-0.06 Overall (README, "The loop, measured"). Half the rows replayed: with 0.3 the
loop's second turn lost what the champion knew (seen 0.393 to 0.383), with 0.5 the same
continuation gained (0.467; README, "Replaying half")."""

CONTINUED_PARENT_SHARE: dict[str, float] = {NANO: 0.25}
"""Where a model trained from a built base continues, the parent's share of the weights it
is registered with (``TrainRequest.parent_share``). A quarter: of the shares 0, 0.25 and
0.5 tried on both later candidates of one loop, 0.25 scored highest on the second (no
capability lost, where 0 lost skills) and kept nearly all of the third's gain, with the
gate's interval furthest above zero, where 0.5 gave up a third of it (README, "Averaging
with the parent"). A tenth, scored on six later candidates of three loops, was level with
it, and a loop at a tenth did not rise at its third turn either (README, "The parent's
share over six candidates")."""


DEFAULT_DEV_SEED = 7
"""The seed a catalog's development set is drawn with, unless a request names another."""

LATEST = "latest"
"""What a request may name instead of a dataset version: the catalog's newest."""


def resolve_dataset(
    dataset_id: str, newest: Callable[[], str | None], field: str = "dataset_id"
) -> str:
    """``dataset_id``, with ``latest`` read as ``newest()`` (the catalog's newest frozen
    version); an ``InvalidInputError`` naming ``field`` when there is none."""
    if dataset_id != LATEST:
        return dataset_id
    found = newest()
    if found is None:
        raise InvalidInputError(field, "the catalog has no dataset version yet: run a round first")
    return found


def built_from(base: str) -> str | None:
    """The built base (``tiny``, ``nano``) that ``base`` is or descends from (a model
    folder whose ``config.json`` says so, ``BUILT_FROM``); None for any other model."""
    if base in BUILT_BASES:
        return base
    try:
        config = json.loads((Path(base) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no folder, a NUL in the path, not UTF-8, not JSON
        return None
    name = config.get(BUILT_FROM) if isinstance(config, dict) else None
    return name if name in BUILT_BASES else None


class TrainRequest(BaseModel):
    """What to train: the trainer flow's parameters. Bad values are refused by name.
    Fields of ``sft`` and ``rl`` left unset take the defaults of the built base that
    ``base`` is or descends from (``BASE_DEFAULTS``), then the records' own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset_id: str = Field(
        pattern=f"^(latest|{DATASET_ID.pattern})$",
        description="the frozen dataset version (ds- and 20 hex digits), or 'latest' where "
        "the entry point resolves it",
    )
    base: str = Field(
        default=TINY, min_length=1, description="'tiny', 'nano' or a local model folder"
    )
    method: TrainingMethod = TrainingMethod.SFT_RL
    sft: SftSettings = Field(default_factory=SftSettings)
    rl: RlSettings = Field(default_factory=RlSettings)
    dev_tasks: int = Field(
        default=DEFAULT_DEV_TASKS,
        ge=1,
        le=10_000,
        description="development tasks stored when none exist (a smaller set is stated in "
        "every report)",
    )
    dev_seed: int = Field(
        default=DEFAULT_DEV_SEED, ge=0, description="seed of that development set"
    )
    eval_samples: int = Field(default=1, ge=1, le=64, description="episodes per dev task")
    seed: int = Field(default=0, ge=0, description="seed of the tiny model's weights")
    parent_share: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="continuing from a model folder (the loop's champion): the share of its "
        "weights averaged into the trained ones once training ends (0: none); a built "
        "base's first run has no parent and is left as trained",
    )

    @field_validator("sft", "rl", mode="before")
    @classmethod
    def _settings(cls, value: Any, info: ValidationInfo) -> Any:
        """The settings from plain values. They refuse a value by its full name
        (``sft.learning_rate``), and pydantic puts the field they sit in before it: named
        here relative to that field, so the request names ``sft.learning_rate`` once."""
        settings = SftSettings if info.field_name == "sft" else RlSettings
        if not isinstance(value, Mapping):
            return value  # a settings record already, or refused by pydantic as no object
        odd = [k for k in value if not isinstance(k, str)]
        if odd:
            raise InvalidInputError("", f"{odd[0]!r} is not a field name")
        try:
            return settings(**value)
        except InvalidInputError as exc:
            relative = exc.field.removeprefix(settings.root).removeprefix(".")
            raise InvalidInputError(relative, exc.problem, exc.allowed) from None

    @model_validator(mode="before")
    @classmethod
    def _base_defaults(cls, data: Any) -> Any:
        """Fill the fields of ``sft`` and ``rl`` a request leaves unset with its base's
        defaults, and ``parent_share`` where it continues from a model of that base, before
        validation: pydantic ignores a copy returned after it when the
        request is built as ``TrainRequest(...)``, which would drop them silently."""
        if not isinstance(data, Mapping):
            return data
        base = data.get("base", TINY)
        root = (built_from(base) or "") if isinstance(base, str) else ""
        defaults = BASE_DEFAULTS.get(root, {})
        if not defaults:
            return data
        continued = CONTINUED_DEFAULTS.get(root, {}) if base != root else {}
        share = CONTINUED_PARENT_SHARE.get(root) if base != root else None
        parent = {} if share is None else {"parent_share": share}
        return {
            **parent,
            **data,
            **{
                part: _with_defaults(
                    data.get(part, {}), {**defaults.get(part, {}), **continued.get(part, {})}
                )
                for part in ("sft", "rl")
            },
        }

    @field_validator("base")
    @classmethod
    def _a_model(cls, base: str) -> str:
        try:
            check_base(base)
        except InvalidInputError as exc:  # named by its place in the request
            raise InvalidInputError("", exc.problem, exc.allowed) from None
        return base

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> TrainRequest:
        """A request from plain values; ``InvalidInputError`` naming the field."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise invalid_input(exc) from None

    @property
    def uses_sft(self) -> bool:
        return self.method in (TrainingMethod.SFT, TrainingMethod.SFT_RL)

    @property
    def uses_rl(self) -> bool:
        return self.method in (TrainingMethod.RL, TrainingMethod.SFT_RL)


def _with_defaults(settings: Any, defaults: Mapping[str, Any]) -> Any:
    """``settings`` (a settings record or its plain values) with ``defaults`` for the
    fields it was not given (an explicit ``max_steps`` keeps a default ``epochs`` out,
    which would replace it); anything else is left for validation to refuse."""
    if isinstance(settings, Hyperparameters):
        given: Mapping[str, Any] = settings.model_dump(include=settings.model_fields_set)
    elif isinstance(settings, Mapping):
        given = settings
    else:
        return settings
    unset = {
        key: value
        for key, value in defaults.items()
        if key not in given and not (key == "epochs" and "max_steps" in given)
    }
    if not unset:
        return settings
    return {**unset, **given}


def refuse_base(path: Path, problem: str) -> InvalidInputError:
    return InvalidInputError("base", f"{path}: {problem}", ALLOWED_BASES)


def check_base(base: str) -> None:
    """Refuse (``InvalidInputError`` naming ``base``) a base that is neither built here
    (``tiny``, ``nano``) nor a directory with a model configuration and tokenizer files,
    without loading weights."""
    if base not in BUILT_BASES:
        check_directory(Path(base))


def check_directory(path: Path) -> None:
    if not path.exists():
        raise refuse_base(path, "no such directory")
    if not path.is_dir():
        raise refuse_base(path, "is a file, not a model directory")
    config = path / "config.json"
    if not config.is_file():
        raise refuse_base(path, "has no config.json: not a Hugging Face model directory")
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise refuse_base(path, f"config.json is not valid JSON ({exc})") from None
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise refuse_base(path, f"has no tokenizer files ({', '.join(TOKENIZER_FILES)})")


def parse_assignments(assignments: Sequence[str]) -> dict[str, Any]:
    """``sft.max_steps=5`` and the like as nested values (JSON where it parses, else
    text): ``{"sft": {"max_steps": 5}}``. A malformed one is an ``InvalidInputError``."""
    values: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise InvalidInputError(
                "--set", f"{assignment!r} is not KEY=VALUE", ["sft.max_steps=20", "rl.updates=8"]
            )
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = text
        node = values
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidInputError("--set", f"{key} sets both {part} and a field of it")
            node = child
        node[path[-1]] = value
    return values
