"""The trainer's steps: a frozen dataset version in, a registered model and its
development-set evaluation out.

``flows/trainer.py`` runs them as Prefect tasks; each is a plain function here:

1. ``prepare``: check the request against the catalog (the dataset version exists; the
   export refuses one holding development tasks) and export the version for training
   (``<home>/training/exports/<dataset id>``, reused when already there).
2. ``load_base``: the tiny model (its tokenizer trained on the export's conversations) or
   a local model directory.
3. ``run_sft`` / ``run_rl`` (``training/sft.py``, ``training/rl.py``) by ``method``;
   ``out_of_memory_guard`` turns an out-of-memory into a clear ``TrainingError``.
   ``average_with_start`` then averages a continued run's weights with those it started
   from (``parent_share``; ``training/parent_average.py``).
4. ``evaluate_model``: greedy decoding on the development set (stored once, then the
   same tasks every time), written as a feedback report (source ``trainer``) that the
   next round plans from.
5. ``register``: the weights, curves and plots are written to a staging folder, renamed
   into ``<home>/models/<name>``, and then the model is registered with its lineage;
   when registration fails the folder is removed, so there is never a half-registered
   model (a folder without a record, or a record without its weights).
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import datasets
import torch
from pydantic import ValidationError

from contract import (
    FeedbackReport,
    FeedbackSource,
    FlywheelError,
    InvalidInputError,
    ModelRecord,
    TaskSpec,
    safe_component,
)
from contract.validation import invalid_input
from envs.simulated import BACKEND as SIMULATED
from storage import Catalog, ModelRegistry, UnknownIdError
from storage.files import path_inside
from training.base_model import RECIPES, BaseModel, corpus_texts, save_model
from training.base_model import load_base as load_base_model
from training.chat_model import LocalChatModel
from training.evaluate import Evaluation, ensure_development_set, evaluate
from training.export import RL_TASKS, SFT, export_dataset
from training.greedy_policy import evaluation_processes, greedy_policy
from training.parent_average import ParentAverage, average_with_parent
from training.plots import Series, line_chart
from training.replay import RowMix, chosen_rows, in_content_order, replay_choice
from training.rl import DevProbe, RlResult
from training.sampling import task_weights
from training.settings import TrainRequest
from training.sft import SftResult

PRODUCED_BY = "flywheel-trainer"
SVG_PLOTS = ("sft_loss", "rl_reward", "rl_success", "rl_informative", "rl_output_tokens")


class TrainingError(FlywheelError):
    """Training could not finish (out of memory); nothing was registered."""


@dataclass(frozen=True)
class TrainingData:
    """The export a run trains on: SFT rows (those ``replay_choice`` picks of the export's
    when the run continues from a registered model), RL tasks (those on simulated tools
    left out: RL would learn what the simulating model accepts, not what the tools do)."""

    path: Path
    sft: datasets.Dataset
    rl_tasks: tuple[TaskSpec, ...]
    mix: RowMix | None = None
    chosen: tuple[int, ...] | None = None
    """The positions of ``sft`` in the export's rows in content order; None: all of them."""
    rl_weights: dict[str, float] | None = None
    """Each task's sampling weight, summed over all the export's rows (``task_weights``):
    what RL draws its tasks by; None when a row has no weight."""


def prepare(catalog: Catalog, home: Path, request: TrainRequest) -> TrainingData:
    """Check the dataset version and export it for training (or reuse its export)."""
    version = catalog.datasets.get(request.dataset_id)  # UnknownIdError names the id
    out = home / "training" / "exports" / version.id
    if not (out / "hf" / "dataset_dict.json").is_file():
        export_dataset(catalog, version.id, out, "hf", overwrite=out.exists(), workers=1)
    rows, tasks, weights = read_export(out)
    start = starting_model(catalog.models, request.base)
    seen = (
        {m.trajectory_id for m in catalog.datasets.get(start.dataset_id).members}
        if start is not None
        else set()
    )
    chosen, mix = replay_choice(
        rows["trajectory_id"],
        seen,
        request.sft.replay_share,
        request.sft.seed,
        start.dataset_id if start else None,
    )
    return TrainingData(out, chosen_rows(rows, chosen), tasks, mix, chosen, weights)


def read_export(
    out: Path,
) -> tuple[datasets.Dataset, tuple[TaskSpec, ...], dict[str, float] | None]:
    """An export folder's SFT rows in content order, its RL tasks less those on simulated
    tools, and each task's sampling weight (``task_weights`` of every row; None without a
    ``weight`` column): what ``prepare`` and every process of ``cli.launch`` train from."""
    saved = datasets.load_from_disk(str(out / "hf"))
    specs = (TaskSpec.model_validate_json(row["task_spec"]) for row in saved[RL_TASKS])
    tasks = tuple(t for t in specs if t.initial_conditions.backend != SIMULATED)
    rows = saved[SFT]
    weights = (
        task_weights(rows["task_id"], rows["weight"]) if "weight" in rows.column_names else None
    )
    return in_content_order(rows), tasks, weights


def starting_model(registry: ModelRegistry, base: str) -> ModelRecord | None:
    """The registered model whose folder ``base`` is, if any (the loop continues from the
    champion's folder)."""
    if base in RECIPES:
        return None
    folder = Path(base).resolve()
    return next((m for m in registry.every() if Path(m.path).resolve() == folder), None)


def load_base(request: TrainRequest, data: TrainingData) -> BaseModel:
    """The base model; a built one gets a tokenizer trained on the export's text."""
    recipe = RECIPES.get(request.base)
    corpus = (
        corpus_texts(data.sft, recipe.chat_template, references=recipe.references)
        if recipe
        else None
    )
    return load_base_model(request.base, corpus, seed=request.seed)


def average_with_start(base: BaseModel, request: TrainRequest) -> ParentAverage | None:
    """Average the trained weights with those the run started from, by
    ``request.parent_share``, where it started from a model folder (the loop's champion);
    None where there was nothing to average (a built base's random start, or share 0)."""
    if request.parent_share == 0 or request.base in RECIPES:
        return None
    return average_with_parent(base.model, Path(request.base), request.parent_share)


@contextmanager
def out_of_memory_guard(stage: str, advice: str) -> Iterator[None]:
    """An out-of-memory in ``stage`` as a ``TrainingError`` that says what to lower."""
    try:
        yield
    except (torch.OutOfMemoryError, MemoryError) as exc:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise TrainingError(
            f"{stage} ran out of memory ({type(exc).__name__}); nothing was registered: "
            f"lower {advice}"
        ) from None


def development_set(catalog: Catalog, request: TrainRequest) -> list[TaskSpec]:
    target = catalog.datasets.get(request.dataset_id).target
    return ensure_development_set(catalog, request.dev_tasks, request.dev_seed, target)


def development_note(tasks: Sequence[TaskSpec], request: TrainRequest) -> str | None:
    """What to tell a person whose ``dev_tasks`` the catalog's development set does not
    have (it was drawn once, with another size); None when it has."""
    if len(tasks) == request.dev_tasks:
        return None
    return (
        f"the development set has {len(tasks)} tasks, not the {request.dev_tasks} asked for: "
        "it was drawn once for this catalog and is kept, so that every model is scored on "
        "the same tasks (a new catalog draws one of the size asked)"
    )


def evaluate_model(
    base: BaseModel,
    tasks: list[TaskSpec],
    request: TrainRequest,
    name: str,
    on_episode: Any = None,
    processes: int | None = None,
) -> Evaluation:
    """Greedy episodes of the model on the development set, as a trainer report: in
    ``processes`` worker processes (None: as many as ``evaluation_processes`` chooses;
    1: in this one)."""
    if processes is None:
        processes = evaluation_processes(base.model, len(tasks) * request.eval_samples)
    with greedy_policy(
        base,
        name,
        max_new_tokens=request.rl.max_new_tokens,
        max_context=request.rl.max_context,
        processes=processes,
    ) as policy:
        return evaluate(
            policy,
            tasks,
            model=name,
            produced_by=PRODUCED_BY,
            source=FeedbackSource.TRAINER,
            samples=request.eval_samples,
            max_steps=request.rl.max_steps,
            budget_of=request.rl.budget_for,
            token_weight=request.rl.token_weight,
            on_episode=on_episode,
        )


def dev_probe(tasks: list[TaskSpec], request: TrainRequest) -> DevProbe:
    """The schedule controller's development probe: greedy episodes of the model being
    trained on ``tasks``, as (success rate, mean normalized cost)."""

    def probe(policy: LocalChatModel) -> tuple[float, float]:
        report = evaluate_model(
            BaseModel(policy.model, policy.tokenizer, policy.name), tasks, request, policy.name
        ).report
        attempts = sum(t.attempts for t in report.tasks)
        successes = sum(t.successes for t in report.tasks)
        return (successes / attempts if attempts else 0.0), report.cost.mean_cost

    return probe


_TRAINED = re.compile(r"^(?P<base>.+?)-(?:sft-rl|sft|rl)-ds-[0-9a-f]+-\d{8}T\d{6}Z$")
"""A name ``model_name`` gave: what it was trained from comes first."""


def model_name(request: TrainRequest, created_at: datetime) -> str:
    """A readable name that is also one safe folder name (``MODEL_NAME``): base, method,
    dataset version and time. A model continued from a trained one keeps that one's base
    (``nano-sft-rl-ds-...``, not ``nano-sft-rl-ds-...-sft-rl-ds-...``): the lineage is
    the registry's ``parent``, not the name."""
    if request.base in RECIPES:
        base = request.base
    else:
        base = safe_component(Path(request.base).name, "base")
        trained = _TRAINED.match(base)
        base = trained.group("base") if trained else base
    method = request.method.value.replace("+", "-")
    return f"{base}-{method}-{request.dataset_id}-{created_at:%Y%m%dT%H%M%SZ}"


@dataclass(frozen=True)
class Curves:
    """What a run measured, as it is saved beside the weights (``training.json``)."""

    sft: SftResult | None
    rl: RlResult | None
    mix: RowMix | None = None
    parent: ParentAverage | None = None

    def to_json(self) -> dict[str, Any]:
        rl = self.rl
        return {
            "sft": self.sft.to_json() if self.sft else None,
            "rows": self.mix.to_json() if self.mix else None,
            "parent_average": self.parent.to_json() if self.parent else None,
            "rl": None
            if rl is None
            else {
                "curve": [u.to_json() for u in rl.curve],
                "regimes_met": sorted(r.value for r in rl.regimes_met),
                "rollouts": rl.trajectories,
                "seconds": rl.seconds,
                "rollouts_per_second": rl.rollouts_per_second,
                "informative_share": rl.informative_share,
                "not_run": rl.not_run,
                "weighted": rl.weighted,
                "schedule_moves": [{"update": update, **vars(move)} for update, move in rl.moves],
                "final_care": vars(rl.final_care),
            },
        }

    def plots(self) -> dict[str, str]:
        """SVG line charts of the curves, by name (``SVG_PLOTS``), those with data."""
        charts: dict[str, str] = {}
        if self.sft and self.sft.curve:
            loss = Series("loss", tuple((p["step"], p["loss"]) for p in self.sft.curve))
            charts["sft_loss"] = line_chart(
                [loss], title="SFT loss", x_label="step", y_label="cross-entropy"
            )
        if self.rl and self.rl.curve:
            curve = self.rl.curve
            regimes = sorted({k for u in curve for k in u.reward_by_regime})
            mean = [Series("mean", tuple((u.update, u.mean_reward) for u in curve))]
            rewards = mean * (len(regimes) > 1) + [  # one regime: its line is the mean
                Series(
                    regime,
                    tuple(
                        (u.update, u.reward_by_regime[regime])
                        for u in curve
                        if regime in u.reward_by_regime
                    ),
                )
                for regime in regimes
            ]
            charts["rl_reward"] = line_chart(
                rewards, title="CARE reward by regime", x_label="update", y_label="reward"
            )
            success = Series("success", tuple((u.update, u.success_rate) for u in curve))
            charts["rl_success"] = line_chart(
                [success], title="Rollout success", x_label="update", y_label="success rate"
            )
            informative = Series(
                "informative", tuple((u.update, u.informative_share) for u in curve)
            )
            charts["rl_informative"] = line_chart(
                [informative],
                title="Informative groups (rewards that differ)",
                x_label="update",
                y_label="share of groups sampled",
            )
            tokens = Series("tokens", tuple((u.update, u.mean_output_tokens) for u in curve))
            charts["rl_output_tokens"] = line_chart(
                [tokens],
                title="Output tokens per rollout",
                x_label="update",
                y_label="tokens",
            )
        return charts


def metrics_of(curves: Curves, report: FeedbackReport) -> dict[str, float]:
    """The model's headline numbers for the registry."""
    metrics: dict[str, float] = {
        f"dev_success.{capability.value}": score
        for capability, score in report.capability_scores.items()
    }
    if report.overall is not None:
        metrics["dev_overall"] = report.overall
    metrics["dev_mean_cost"] = report.cost.mean_cost
    metrics["dev_mean_output_tokens"] = report.cost.mean_output_tokens
    if curves.sft is not None:
        metrics["sft_rows"] = curves.sft.rows_used
        metrics["sft_epochs"] = curves.sft.epochs
    if curves.sft and curves.sft.curve:
        metrics["sft_final_loss"] = curves.sft.curve[-1]["loss"]
        metrics["sft_tokens_per_second"] = curves.sft.tokens_per_second
    if curves.rl and curves.rl.curve:
        metrics["rl_final_mean_reward"] = curves.rl.curve[-1].mean_reward
        metrics["rl_rollouts_per_second"] = curves.rl.rollouts_per_second
        metrics["rl_informative_share"] = curves.rl.informative_share
    return metrics


def register(
    catalog: Catalog,
    home: Path,
    base: BaseModel,
    request: TrainRequest,
    name: str,
    created_at: datetime,
    curves: Curves,
    report: FeedbackReport,
    flow_run_id: str | None = None,
) -> ModelRecord:
    """Save the model, its curves and plots; then store the report and register the
    model in one transaction (a report whose model was never registered would be the
    feedback the next round plans from).

    Checked before anything is written: the name is new, the record is valid (a diverged
    run's NaN loss is refused by name), and the dataset version is in this catalog."""
    models = home / "models"
    models.mkdir(parents=True, exist_ok=True)
    final = path_inside(models, name)
    if final.exists():
        raise InvalidInputError("name", f"{final} exists already: a model is never overwritten")
    try:
        record = ModelRecord(
            name=name,
            dataset_id=request.dataset_id,
            base=request.base,
            method=request.method,
            hyperparameters=request.model_dump(
                mode="json", exclude={"dataset_id", "base", "method"}
            ),
            metrics=metrics_of(curves, report),
            path=str(final.resolve()),
            feedback_id=report.id,
            created_at=created_at,
            flow_run_id=flow_run_id,
        )
    except ValidationError as exc:
        raise invalid_input(exc) from None
    if request.dataset_id not in {d.id for d in catalog.datasets.summaries()}:
        raise UnknownIdError("dataset", request.dataset_id, where=str(catalog.path))
    staging = models / f".{name}.{uuid.uuid4().hex[:8]}.partial"
    try:
        save_model(base, staging)
        (staging / "training.json").write_text(
            json.dumps(curves.to_json(), indent=2, default=str), encoding="utf-8"
        )
        (staging / "evaluation.json").write_text(report.to_json().decode(), encoding="utf-8")
        for plot, svg in curves.plots().items():
            (staging / f"{plot}.svg").write_text(svg, encoding="utf-8")
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        catalog.models.register(record, report)  # the report and the model, or neither
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    return record


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)
