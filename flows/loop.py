"""``loop``: K turns of the flywheel, round → train → deploy, each feeding the next.

Each turn runs the three flows as subflows:

1. ``flywheel_round`` plans from the newest feedback report (the last training's and
   deployment's evaluations) and collects with the served champion once there is one
   (``collect_with = champion``; the first turn, with no champion yet, uses the settings'
   policy). Its trajectories are the deployment's traces; ``teacher_share`` of its tasks
   go to the scripted teacher, so a weak champion still leaves something to learn from,
   and with ``champion_tasks`` the champion collects at most that many (a weak
   champion's episodes use their whole step budget: minutes of a turn);
2. ``trainer`` trains on the dataset version the round froze, continuing from the
   champion's weights when there is one (``from_champion``), else from ``base``;
3. ``deployment`` evaluates that model against the champion and promotes it if the gate
   allows, which changes what the next turn collects with.

A turn whose round froze no dataset version (nothing was approved: with
``teacher_share`` 0 an untrained champion fails everything) trains and deploys nothing;
the table says so. After every turn the
``loop-progress`` artifact shows, per turn, the champion's development-set Overall and
success per capability, the dataset size, and the champion's mean cost, as a table and
as plots.

No ``from __future__ import annotations`` (Prefect validates these annotations).
"""

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run
from pydantic import BaseModel, Field

from contract import (
    DEFAULT_DEV_TASKS,
    Capability,
    DeploymentDecision,
    FeedbackReport,
    ModelAlias,
    ModelRecord,
    TrainingMethod,
)
from flows.deployment import deployment
from flows.round import flywheel_round
from flows.round_config import teacher_share_for
from flows.servers.model import ModelServer
from flows.settings import FlywheelSettings, catalog_path, load_settings
from storage import Catalog, FeedbackStore, ModelRegistry
from training.plots import Series, line_chart, markdown_figure
from training.settings import DEFAULT_DEV_SEED, TINY, RlSettings, SftSettings


class Turn(BaseModel):
    """One turn of the loop, as the progress table shows it."""

    turn: int
    round_id: str
    collected_by: str
    trajectories: int
    dataset_id: str | None
    dataset_size: int
    model_id: str | None = None
    candidate_overall: float | None = None
    """The turn's trained model's Overall on the development set (all of it)."""
    candidate_seen: float | None = None
    """Its Overall on the seen-templates part: what the gate compared, before it decided."""
    decision: str | None = None
    champion_id: str | None = None
    overall: float | None = None
    capability_scores: dict[str, float] = Field(default_factory=dict)
    overall_seen: float | None = None
    """The champion's Overall on the development set's seen-templates part."""
    overall_unseen: float | None = None
    seen_scores: dict[str, float] = Field(default_factory=dict)
    unseen_scores: dict[str, float] = Field(default_factory=dict)
    mean_cost: float | None = None
    minutes: float = 0.0
    """Wall minutes of the turn: round, training, deployment."""
    cpu_minutes: float = 0.0
    """CPU minutes of this process during the turn (the model server's not included)."""
    sft_rows: int | None = None
    """Rows the turn's SFT trained on (new and replayed)."""
    sft_epochs: float | None = None
    informative_share: float | None = None
    """Share of the turn's RL groups whose rewards differed; None when RL did not run."""
    note: str = ""

    def record_training(self, trained: Mapping[str, Any], decision: str) -> None:
        """The turn's candidate, from the trainer's result (``trained``), and the gate's
        ``decision``; the champion's figures come from the catalog after the turn."""
        self.model_id = trained["model_id"]
        self.candidate_overall = trained["overall"]
        self.candidate_seen = trained["parts"].get("seen")
        self.decision = decision
        metrics = trained["metrics"]
        rows = metrics.get("sft_rows")
        self.sft_rows = None if rows is None else int(rows)
        self.sft_epochs = metrics.get("sft_epochs")
        self.informative_share = metrics.get("rl_informative_share")


@flow(name="loop")
def loop(
    rounds: Annotated[int, Field(ge=1, le=100)] = 2,
    tasks: Annotated[int, Field(ge=1)] | None = None,
    collect_with: Literal["champion", "settings"] = "champion",
    teacher_share: Annotated[float, Field(ge=0, le=1)] = 0.5,
    champion_tasks: Annotated[int, Field(ge=0)] | None = None,
    correct_failures: bool | None = None,
    from_champion: bool = True,
    base: str = TINY,
    method: TrainingMethod = TrainingMethod.SFT_RL,
    sft: SftSettings | None = None,
    rl: RlSettings | None = None,
    dev_tasks: Annotated[int, Field(ge=1)] = DEFAULT_DEV_TASKS,
    dev_seed: Annotated[int, Field(ge=0)] = DEFAULT_DEV_SEED,
    eval_samples: Annotated[int, Field(ge=1, le=64)] = 1,
    seed: Annotated[int, Field(ge=0)] = 0,
    parent_share: Annotated[float, Field(ge=0, lt=1)] | None = None,
) -> dict[str, Any]:
    """``rounds`` turns of round → train → deploy (module docstring).

    Args:
        rounds: Turns of round, training and deployment.
        tasks: Tasks per round. None: from the settings.
        collect_with: champion (the served model, once there is one) or settings (the
            settings' policy every round).
        teacher_share: Share of a champion-collected round's tasks the scripted teacher
            collects.
        champion_tasks: At most this many of a round's tasks collected by the champion
            (the teacher takes the rest). None: no cap.
        correct_failures: The scripted teacher collects again each task the champion
            failed in a round, so the version gains rows where the champion errs. None:
            from the settings (``[round] correct_failures``).
        from_champion: Train each turn from the champion's weights (else from base).
        base: tiny, nano, or a local model folder: what the first turn trains from.
        method: sft, rl or sft+rl.
        sft: SFT hyperparameters for every turn. None: the base's defaults.
        rl: RL hyperparameters for every turn. None: the base's defaults.
        dev_tasks: Development tasks drawn when the catalog has none yet.
        dev_seed: Seed of that draw.
        eval_samples: Attempts per development task.
        seed: Seed of the first round (each turn adds one) and of training.
        parent_share: A turn continuing from the champion: the champion's share of the
            weights averaged into the trained ones. None: the base's default (0.25 for
            nano's descendants).
    """
    settings = load_settings()
    log = get_run_logger()
    turns: list[Turn] = []
    for number in range(1, rounds + 1):
        started, cpu = time.perf_counter(), time.process_time()
        policy = _collector(settings, collect_with)
        planned = tasks if tasks is not None else settings.round.tasks
        share = teacher_share_for(teacher_share, champion_tasks, planned)
        summary = flywheel_round(
            tasks=tasks,
            seed=seed + number - 1,
            policy=policy,
            teacher_share=share if policy == "champion" else None,
            correct_failures=correct_failures if policy == "champion" else None,
        )
        dataset_id = summary.dataset_version
        turn = Turn(
            turn=number,
            round_id=summary.round_id,
            collected_by=_collected_by(settings.home, summary.round_id),
            trajectories=summary.counts.get("collected", 0),
            dataset_id=dataset_id,
            dataset_size=summary.counts.get("in_dataset", 0) if dataset_id else 0,
        )
        if dataset_id is None:
            turn.note = "the round froze no dataset version: nothing to train on"
        else:
            champion = _champion(settings.home) if from_champion else None
            start = champion.path if champion is not None else base
            trained = _train(
                dataset_id=dataset_id,
                base=start,
                method=method,
                sft=sft,
                rl=rl,
                dev_tasks=dev_tasks,
                dev_seed=dev_seed,
                eval_samples=eval_samples,
                seed=seed,
                parent_share=parent_share,
            )
            record = deployment(model=trained["model_id"])
            turn.record_training(trained, record["decision"])
        _score(settings.home, turn)
        turn.minutes = round((time.perf_counter() - started) / 60, 2)
        turn.cpu_minutes = round((time.process_time() - cpu) / 60, 2)
        turns.append(turn)
        log.info(
            "turn %d/%d: %s, dataset %s (%d), champion %s, Overall %s",
            number,
            rounds,
            turn.round_id,
            turn.dataset_id,
            turn.dataset_size,
            turn.champion_id,
            turn.overall,
        )
        publish_progress(turns)
    return {
        "flow_run_id": str(flow_run.get_id() or "") or None,
        "turns": [t.model_dump(mode="json") for t in turns],
    }


def _collector(settings: FlywheelSettings, collect_with: str) -> Any:
    """``champion`` once there is one (served now if it was not), else the settings'."""
    if collect_with != "champion" or _champion(settings.home) is None:
        return None
    ModelServer(settings.home, settings.serving.port, settings.serving).start()
    return "champion"


def _train(**parameters: Any) -> dict[str, Any]:
    """The ``trainer`` flow on a turn's version, as a subflow of the loop."""
    from flows.trainer import trainer  # torch and TRL load only when a turn trains

    trained: dict[str, Any] = trainer(**parameters)
    return trained


def _champion(home: Path) -> ModelRecord | None:
    if not catalog_path(home).exists():  # before the first round
        return None
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        return catalog.models.alias(ModelAlias.CHAMPION)


def _collected_by(home: Path, round_id: str) -> str:
    """The policies (and models) that collected the round's trajectories."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        policies = {
            t.metadata.policy.model or t.metadata.policy.name
            for t in catalog.trajectories.of_round(round_id)
        }
    return ", ".join(sorted(policies)) or "nothing"


def _score(home: Path, turn: Turn) -> None:
    """The champion after the turn, and its development-set report."""
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        champion = catalog.models.alias(ModelAlias.CHAMPION)
        report: FeedbackReport | None = None
        if champion is not None:
            report = _champion_report(catalog.models, catalog.feedback, champion)
    if champion is None or report is None:
        return
    turn.champion_id = champion.id
    turn.overall = report.overall
    turn.capability_scores = {c.value: s for c, s in report.capability_scores.items()}
    turn.mean_cost = report.cost.mean_cost
    seen, unseen = report.parts.get("seen"), report.parts.get("unseen")
    if seen is not None:
        turn.overall_seen = seen.overall
        turn.seen_scores = {c.value: v for c, v in seen.capability_scores.items()}
    if unseen is not None:
        turn.overall_unseen = unseen.overall
        turn.unseen_scores = {c.value: v for c, v in unseen.capability_scores.items()}


def _champion_report(
    registry: ModelRegistry, reports: FeedbackStore, champion: ModelRecord
) -> FeedbackReport | None:
    """The report the last deployment that served ``champion`` compared it by."""
    for record in registry.deployments():
        if record.served_id == champion.id and record.decision is DeploymentDecision.PROMOTED:
            report_id = record.candidate_report_id
            return reports.get(report_id) if report_id else None
    return reports.get(champion.feedback_id) if champion.feedback_id else None


def publish_progress(turns: list[Turn]) -> None:
    """The ``loop-progress`` artifacts: a table, and plots per turn."""
    create_table_artifact(
        key="loop-progress-table",
        table=[
            {
                "turn": t.turn,
                "round": t.round_id,
                "collected by": t.collected_by,
                "dataset size": t.dataset_size,
                "decision": t.decision or t.note,
                "candidate's overall, seen templates": t.candidate_seen,
                "champion": t.champion_id,
                "overall": t.overall,
                "overall, seen templates": t.overall_seen,
                "overall, unseen templates": t.overall_unseen,
                "mean cost": t.mean_cost,
                "minutes": t.minutes,
                "SFT rows": t.sft_rows,
                "SFT epochs": t.sft_epochs,
                "informative RL groups": t.informative_share,
            }
            for t in turns
        ],
        description="The flywheel loop, turn by turn",
    )
    create_markdown_artifact(
        key="loop-progress", markdown=progress_markdown(turns), description="The loop's plots"
    )


def progress_markdown(turns: list[Turn]) -> str:
    """Plots of the champion's scores, the dataset size and the mean cost per turn."""
    scored = [t for t in turns if t.overall is not None]
    scores = [Series("overall", tuple((t.turn, t.overall or 0.0) for t in scored))]
    scores += [
        Series(
            f"overall, {part} templates",
            tuple((t.turn, value) for t in scored if (value := getattr(t, attr)) is not None),
        )
        for part, attr in (("seen", "overall_seen"), ("unseen", "overall_unseen"))
    ]
    scores += [
        Series(
            c.value,
            tuple(
                (t.turn, t.capability_scores[c.value])
                for t in scored
                if c.value in t.capability_scores
            ),
        )
        for c in Capability
    ]
    charts = {
        "development success of the champion": line_chart(
            [s for s in scores if s.points],
            title="Champion on the development set",
            x_label="turn",
            y_label="success (share of tasks, 0 to 1)",
            integer_x=True,
            y_range=(0.0, 1.0),
        ),
        "dataset size": line_chart(
            [Series("dataset", tuple((t.turn, float(t.dataset_size)) for t in turns))],
            title="Dataset version size",
            x_label="turn",
            y_label="members",
            integer_x=True,
        ),
        "mean cost": line_chart(
            [
                Series(
                    "mean cost",
                    tuple((t.turn, t.mean_cost) for t in scored if t.mean_cost is not None),
                )
            ],
            title="Champion's mean normalized cost",
            x_label="turn",
            y_label="cost (0 to 1)",
            integer_x=True,
            y_range=(0.0, 1.0),
        ),
    }
    figures = "\n\n".join(markdown_figure(svg, title) for title, svg in charts.items())
    return f"# The flywheel loop: {len(turns)} turn(s)\n\n{figures}\n"
