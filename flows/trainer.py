"""``trainer``: a frozen dataset version → SFT and/or online RL with CARE → a registered
model, its curves, and a development-set report the next round plans from.

Thin Prefect orchestration over ``training/trainer.py``. Every parameter is typed, so the
Prefect UI shows a form (dataset version, base, method, the SFT and RL hyperparameters).
Progress shows as progress artifacts while SFT, RL and the evaluation run; the curves
come out as a markdown artifact with plots, and as SVG files beside the weights.

No ``from __future__ import annotations`` here: Prefect validates a deployment run's
parameters against the flow's annotations after loading this file by its path, and
string annotations naming imported types do not resolve there.
"""

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from contract import DEFAULT_DEV_TASKS, FeedbackReport, ModelRecord, TaskSpec, TrainingMethod
from flows.progress import Milestones, ProgressArtifact
from flows.settings import catalog_path, load_settings
from storage import Catalog
from training import rl as rl_training
from training import sft as sft_training
from training import trainer as steps
from training.base_model import BaseModel
from training.evaluate import Evaluation
from training.parent_average import ParentAverage
from training.plots import markdown_figure
from training.rl import RlResult, UpdateRecord
from training.settings import (
    DEFAULT_DEV_SEED,
    LATEST,
    TINY,
    RlSettings,
    SftSettings,
    TrainRequest,
    resolve_dataset,
)
from training.sft import SftResult
from training.trainer import Curves, TrainingData


@task(name="prepare", cache_policy=NO_CACHE)
def prepare_task(home: Path, request: TrainRequest) -> TrainingData:
    log = get_run_logger()
    log.info("preparing %s: its export for training (made once, then reused)", request.dataset_id)
    with Catalog.open(catalog_path(home)) as catalog:
        data = steps.prepare(catalog, home, request)
    log.info(
        "dataset %s: %d SFT rows, %d RL tasks (export %s)",
        request.dataset_id,
        len(data.sft),
        len(data.rl_tasks),
        data.path,
    )
    mix = data.mix
    if mix is not None and mix.continued_from is not None:
        log.info(
            "continuing from a model trained on %s: %d new rows and %d of its %d rows replayed",
            mix.continued_from,
            mix.new,
            mix.replayed,
            mix.seen,
        )
    return data


@task(name="load-base", cache_policy=NO_CACHE)
def load_base_task(request: TrainRequest, data: TrainingData) -> BaseModel:
    base = steps.load_base(request, data)
    parameters = sum(p.numel() for p in base.model.parameters())
    get_run_logger().info("base %s: %d parameters", base.name, parameters)
    return base


@task(name="sft", cache_policy=NO_CACHE)
def sft_task(base: BaseModel, data: TrainingData, settings: SftSettings, work: Path) -> SftResult:
    log = get_run_logger()
    progress = ProgressArtifact("trainer-sft", "SFT steps done")

    def on_log(point: dict[str, Any]) -> None:
        progress(point["step"], point["max_steps"])
        log.info("SFT step %d/%d: loss %.4f", point["step"], point["max_steps"], point["loss"])

    log.info("SFT: tokenizing %d rows (up to %d tokens each), then training", len(data.sft),
             settings.max_length)  # fmt: skip
    with steps.out_of_memory_guard("SFT", "sft.batch_size or sft.max_length"):
        return sft_training.run_sft(base, data.sft, settings, work / "sft", on_log=on_log)


@task(name="rl", cache_policy=NO_CACHE)
def rl_task(
    home: Path,
    base: BaseModel,
    tasks: tuple[TaskSpec, ...],
    weights: dict[str, float] | None,
    request: TrainRequest,
    work: Path,
) -> RlResult:
    log = get_run_logger()
    settings = request.rl
    probe = None
    if settings.schedule_every:  # the schedule controller reads the development set
        with Catalog.open(catalog_path(home)) as catalog:
            probe = steps.dev_probe(steps.development_set(catalog, request), request)
    progress = ProgressArtifact("trainer-rl", "RL updates done")

    def on_update(update: UpdateRecord) -> None:
        progress(update.update, settings.updates)
        log.info(
            "RL update %d/%d: %s, reward %.3f, success %.2f, "
            "regimes %s, informative groups %d/%d (%d skipped)",
            update.update,
            settings.updates,
            update.movement(),
            update.mean_reward,
            update.success_rate,
            update.regimes,
            update.informative,
            update.groups,
            update.skipped,
        )

    advice = "rl.tasks_per_update, rl.group_size, rl.max_new_tokens or rl.max_steps"
    with steps.out_of_memory_guard("RL", advice):
        result = rl_training.run_rl(
            base,
            tasks,
            settings,
            work / "rl",
            weights=weights,
            on_update=on_update,
            dev_probe=probe,
        )
    if result.not_run:
        log.info(result.not_run)
    for update, move in result.moves:
        log.info(
            "schedule after update %d: %s %s -> %s (%s)",
            update,
            move.parameter,
            move.before,
            move.after,
            move.reason,
        )
    return result


@task(name="average-with-parent", cache_policy=NO_CACHE)
def average_task(base: BaseModel, request: TrainRequest) -> ParentAverage | None:
    average = steps.average_with_start(base, request)
    if average is not None:
        get_run_logger().info(
            "averaged %d parameters with the parent's (%s), its share %.2f",
            average.parameters,
            average.parent,
            average.share,
        )
    return average


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_task(home: Path, base: BaseModel, request: TrainRequest, name: str) -> Evaluation:
    with Catalog.open(catalog_path(home)) as catalog:
        tasks = steps.development_set(catalog, request)
    note = steps.development_note(tasks, request)
    if note is not None:
        get_run_logger().warning("%s", note)
    progress = ProgressArtifact("trainer-evaluation", "development episodes done")
    said = Milestones(get_run_logger(), "development episodes done")

    def on_episode(done: float, total: float) -> None:
        progress(done, total)
        said(done, total)

    evaluation = steps.evaluate_model(base, tasks, request, name, on_episode=on_episode)
    report = evaluation.report
    get_run_logger().info(
        "development set: %d tasks, overall %s, %s",
        len(tasks),
        "n/a" if report.overall is None else f"{report.overall:.3f}",
        {c.value: round(s, 3) for c, s in report.capability_scores.items()},
    )
    return evaluation


@task(name="register", cache_policy=NO_CACHE)
def register_task(
    home: Path,
    base: BaseModel,
    request: TrainRequest,
    name: str,
    curves: Curves,
    report: FeedbackReport,
    created_at: Any,
) -> ModelRecord:
    run_id = str(flow_run.get_id() or "") or None
    with Catalog.open(catalog_path(home)) as catalog:
        return steps.register(
            catalog, home, base, request, name, created_at, curves, report, run_id
        )


@flow(name="trainer")
def trainer(
    dataset_id: str = LATEST,
    base: str = TINY,
    method: TrainingMethod = TrainingMethod.SFT_RL,
    sft: SftSettings | None = None,
    rl: RlSettings | None = None,
    dev_tasks: int = DEFAULT_DEV_TASKS,
    dev_seed: int = DEFAULT_DEV_SEED,
    eval_samples: int = 1,
    seed: int = 0,
    parent_share: float | None = None,
    deploy: bool = False,
) -> dict[str, Any]:
    """Train on a frozen dataset version, evaluate on the development set, register the
    model; with ``deploy``, then run the ``deployment`` flow on it (promoted if the gate
    allows).

    Args:
        dataset_id: The frozen dataset version to train on (ds- and 20 hex digits), or
            latest: the newest one.
        base: tiny (runs anywhere, learns little), nano (the CPU base that learns), or a
            local Hugging Face model folder.
        method: sft (supervised fine-tuning), rl (online RL with CARE) or sft+rl (SFT,
            then RL, in one run).
        sft: SFT hyperparameters. None, or a field left out: the base's defaults.
        rl: RL hyperparameters. None, or a field left out: the base's defaults.
        dev_tasks: Development tasks drawn when the catalog has none yet (kept after).
        dev_seed: Seed of that draw.
        eval_samples: Attempts per development task.
        seed: Seed of training and evaluation.
        parent_share: Continuing from a model folder: the share of its weights averaged
            into the trained ones at the end (0: none). None: the base's default (0.25
            where a nano model continues, else 0).
        deploy: Run the deployment flow on the new model afterwards.
    """
    if dataset_id == LATEST:
        with Catalog.open(catalog_path(load_settings().home), read_only=True) as catalog:
            dataset_id = resolve_dataset(dataset_id, catalog.datasets.latest_id)
    request = TrainRequest.of(
        {
            "dataset_id": dataset_id,
            "base": base,
            "method": method,
            "sft": sft or SftSettings(),
            "rl": rl or RlSettings(),
            "dev_tasks": dev_tasks,
            "dev_seed": dev_seed,
            "eval_samples": eval_samples,
            "seed": seed,
        }
        | ({} if parent_share is None else {"parent_share": parent_share})
    )
    record, report = run_training(load_settings().home, request)
    deployed: dict[str, Any] | None = None
    if deploy:
        from flows.deployment import deployment

        deployed = deployment(model=record.id)
    return {
        "deployment": deployed,
        "model_id": record.id,
        "name": record.name,
        "path": record.path,
        "dataset_id": record.dataset_id,
        "method": record.method.value,
        "feedback_id": report.id,
        "overall": report.overall,
        "capability_scores": {c.value: s for c, s in report.capability_scores.items()},
        "parts": {part: scores.overall for part, scores in report.parts.items()},
        "development_notes": report.notes,
        "metrics": record.metrics,
        "flow_run_id": record.flow_run_id,
    }


def run_training(home: Path, request: TrainRequest) -> tuple[ModelRecord, FeedbackReport]:
    """The body of ``trainer`` (inside a flow run)."""
    created_at = steps.now()
    name = steps.model_name(request, created_at)
    work = home / "training" / "runs" / name
    data = prepare_task(home, request)
    base = load_base_task(request, data)
    sft_result = sft_task(base, data, request.sft, work) if request.uses_sft else None
    rl_result = (
        rl_task(home, base, data.rl_tasks, data.rl_weights, request, work)
        if request.uses_rl
        else None
    )
    parent = average_task(base, request)
    curves = Curves(sft_result, rl_result, data.mix, parent)
    evaluation = evaluate_task(home, base, request, name)
    record = register_task(home, base, request, name, curves, evaluation.report, created_at)
    _publish(record, curves, evaluation.report)
    get_run_logger().info("registered %s (%s) at %s", record.id, record.name, record.path)
    return record, evaluation.report


def _parts(report: FeedbackReport) -> str:
    """``seen templates 0.412, unseen templates 0.200``."""

    def shown(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return (
        ", ".join(
            f"{part} templates {shown(scores.overall)}" for part, scores in report.parts.items()
        )
        or "no labelled parts"
    )


def _averaged(parent: ParentAverage | None) -> str:
    """`` (averaged with it, its share 0.50)`` where it was."""
    return "" if parent is None else f" (averaged with it, its share {parent.share:.2f})"


def _publish(record: ModelRecord, curves: Curves, report: FeedbackReport) -> None:
    figures = "\n\n".join(
        markdown_figure(svg, title.replace("_", " ")) for title, svg in curves.plots().items()
    )
    overall = "n/a" if report.overall is None else f"{report.overall:.3f}"
    create_markdown_artifact(
        key="trainer-report",
        markdown=(
            f"# {record.name}\n\n"
            f"Model `{record.id}` trained by `{record.method.value}` on `{record.dataset_id}` "
            f"from `{record.base}`{_averaged(curves.parent)}; "
            f"development Overall **{overall}** ({_parts(report)}); "
            f"feedback report `{report.id}`.\n\n{report.notes}\n\n{figures}\n"
        ),
        description="Training curves and the development-set result",
    )
    create_table_artifact(
        key="trainer-development",
        table=[
            {"capability": c.value, "success": round(s, 4)}
            for c, s in report.capability_scores.items()
        ]
        + [{"capability": "overall", "success": report.overall}]
        + [
            {"capability": f"overall, {part} templates", "success": scores.overall}
            for part, scores in report.parts.items()
        ],
        description="Development-set success per capability (MobilePA-style Overall)",
    )
    if curves.rl is not None:
        create_table_artifact(
            key="trainer-rl-curve",
            table=[u.to_json() for u in curves.rl.curve],
            description="Online RL: loss, CARE reward, success and output tokens per update",
        )
