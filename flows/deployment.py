"""``deployment`` and ``rollback``: which registered model the endpoint serves, and why.

``deployment`` takes a registered candidate through

1. **resolve**: the candidate (an id, a name, ``latest`` or ``candidate``) becomes the
   ``candidate`` alias; the champion and the development set are read;
2. **evaluate**: both models on the development set, the same tasks with the same seeds,
   under the candidate's harness (``training/comparison.py``: a registered report made
   under that harness on that set is reused, else the model runs again);
3. **gate**: ``training/promotion.py`` (delta on the Overall, epsilon per capability);
4. **approve**: with ``approval = person`` a promotion the gate allows waits, paused,
   for someone to approve it in the Prefect UI;
5. **serve**: the candidate goes behind the model server and must answer a real chat
   completion (``flows/endpoint.py``); on failure the old champion is served again;
6. **record**: the trace (``contract.DeploymentRecord``: models, reports, harness,
   endpoint, decision, reasons, approver) and the alias changes in one transaction; if
   that fails, the server is put back on the old champion.

``rollback`` serves the previous champion and records it the same way. Either way the
registry and the endpoint agree at the end, or the flow fails having changed neither.

No ``from __future__ import annotations``: Prefect validates a deployment run's
parameters against these annotations (see ``flows/trainer.py``).
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from prefect.runtime import flow_run
from pydantic import Field

from contract import (
    MODEL_REF,
    Capability,
    DeploymentDecision,
    DeploymentRecord,
    FeedbackReport,
    FlywheelError,
    InvalidInputError,
    ModelAlias,
    ModelRecord,
    TaskSpec,
)
from flows.endpoint import Served, serve_model
from flows.servers.model import ModelServer
from flows.settings import (
    ApprovalMode,
    DeploymentSettings,
    FlywheelSettings,
    catalog_path,
    load_settings,
)
from serving.client import ServingError
from storage import Catalog, ModelRegistry
from training.comparison import Harness, capability_rows, report_for
from training.evaluate import development_tasks
from training.promotion import PromotionDecision, PromotionRule, decide_promotion

Share = Annotated[float, Field(ge=0, le=1)]
MODEL_REFERENCES = ("<model id>", "<model name>", "latest", "candidate")
AUTOMATIC = "auto"


class PromotionForm(RunInput):
    """The form in the Prefect UI: promote the candidate, or keep the champion."""

    approve: bool = Field(description="serve the candidate as the champion (untick to refuse)")
    approver: str = Field(pattern=r"\S", max_length=200, description="your name")
    comment: str = Field(default="", max_length=2000, description="why, for the team")


@dataclass(frozen=True)
class Contest:
    """The candidate and the champion, their reports on one development set."""

    candidate: ModelRecord
    champion: ModelRecord | None
    candidate_report: FeedbackReport
    champion_report: FeedbackReport | None
    harness: Harness
    tasks: int
    reused: tuple[str, ...]
    """Ids of the models whose registered report stood for a new evaluation."""
    capabilities: dict[str, tuple[Capability, ...]] = field(default_factory=dict)
    """Per development task fingerprint: what the paired interval weighs it by."""


@flow(name="deployment")
def deployment(
    model: str = "latest",
    min_overall_gain: Share | None = None,
    max_capability_drop: Share | None = None,
    approval: ApprovalMode | None = None,
    serve: bool | None = None,
    reevaluate: bool = False,
) -> dict[str, Any]:
    """Evaluate a registered model against the champion on the development set, promote
    it if the gate allows (and a person approves, with ``approval`` ``person``), serve
    it, and record the decision.

    Args:
        model: The model: its id, its name, latest (the newest registered) or candidate.
        min_overall_gain: The Overall must improve on the champion's by at least this.
            None: from the [deployment] settings.
        max_capability_drop: No capability may score lower than the champion's by more.
            None: from the [deployment] settings.
        approval: auto, or person (the run pauses until someone approves the promotion
            in this UI). None: from the [deployment] settings.
        serve: Serve the promoted model on the model server. None: from the settings.
        reevaluate: Evaluate again even when an evaluation on today's development set is
            stored.
    """
    MODEL_REF.check("model", model)
    settings = load_settings()
    section = settings.deployment
    rule = promotion_rule(
        section, min_overall_gain=min_overall_gain, max_capability_drop=max_capability_drop
    )
    record = run_deployment(
        settings,
        model,
        rule,
        approval=approval or section.approval,
        serve=section.serve if serve is None else serve,
        reevaluate=reevaluate,
    )
    return record.model_dump(mode="json")


def promotion_rule(
    section: DeploymentSettings,
    *,
    min_overall_gain: float | None = None,
    max_capability_drop: float | None = None,
) -> PromotionRule:
    """The gate's rule from the ``[deployment]`` settings, a bound given here in place of
    the setting's."""
    return PromotionRule(
        min_overall_gain=section.min_overall_gain if min_overall_gain is None else min_overall_gain,
        max_capability_drop=(
            section.max_capability_drop if max_capability_drop is None else max_capability_drop
        ),
        min_interval_low=section.min_interval_low,
    )


def run_deployment(
    settings: FlywheelSettings,
    model: str,
    rule: PromotionRule,
    *,
    approval: ApprovalMode,
    serve: bool,
    reevaluate: bool,
) -> DeploymentRecord:
    """The body of ``deployment`` (inside a flow run)."""
    log = get_run_logger()
    home = settings.home
    candidate, champion, tasks = resolve_task(home, model)
    contest = evaluate_task(home, candidate, champion, tasks, reevaluate)
    decision = gate_task(contest, rule)
    log.info(
        "gate: %s (%s)", "promote" if decision.promote else "keep", "; ".join(decision.reasons)
    )
    outcome, reasons, approver = _approve(contest, decision, approval, settings)
    served: Served | None = None
    if outcome is DeploymentDecision.PROMOTED and _must_serve(settings, serve):
        try:
            served = serve_task(home, settings, candidate, champion)
        except ServingError as exc:
            outcome, reasons = DeploymentDecision.FAILED, (*reasons, str(exc))
            log.error("%s", exc)
    record = _trace(contest, decision, rule, outcome, reasons, approver, served, settings)
    record_task(home, settings, record, served, champion)
    _publish(record, contest)
    log.info("deployment %s: %s; champion %s", record.id, outcome.value, record.served_id)
    return record


@task(name="resolve", cache_policy=NO_CACHE)
def resolve_task(home: Path, model: str) -> tuple[ModelRecord, ModelRecord | None, list[TaskSpec]]:
    """The candidate (now the ``candidate`` alias), the champion, the development set."""
    with Catalog.open(catalog_path(home)) as catalog:
        candidate = resolve_model(catalog.models, model)
        champion = catalog.models.alias(ModelAlias.CHAMPION)
        if champion is None or champion.id != candidate.id:
            catalog.models.set_alias(
                ModelAlias.CANDIDATE, candidate.id, reason="proposed for deployment"
            )
        tasks = development_tasks(catalog)
    return candidate, champion, tasks


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_task(
    home: Path,
    candidate: ModelRecord,
    champion: ModelRecord | None,
    tasks: list[TaskSpec],
    reevaluate: bool,
) -> Contest:
    """Both reports under the candidate's harness; new ones are stored as feedback (the
    champion's first, so the candidate's is the newest report the next round reads)."""
    log = get_run_logger()
    harness = Harness.of_model(candidate)
    reports: dict[str, FeedbackReport] = {}
    reused: list[str] = []
    for record in (champion, candidate):
        if record is None or record.id in reports:
            continue
        registered = _registered_report(home, record)
        report, was_reused = report_for(record, registered, harness, tasks, reevaluate=reevaluate)
        if was_reused:
            reused.append(record.id)
        else:
            with Catalog.open(catalog_path(home)) as catalog:
                catalog.feedback.add(report)
        log.info(
            "%s: Overall %s (%s)",
            record.id,
            "n/a" if report.overall is None else f"{report.overall:.3f}",
            "registered report reused" if was_reused else f"evaluated, report {report.id}",
        )
        reports[record.id] = report
    return Contest(
        candidate=candidate,
        champion=champion,
        candidate_report=reports[candidate.id],
        champion_report=reports[champion.id] if champion else None,
        harness=harness,
        tasks=len(tasks),
        reused=tuple(reused),
        capabilities={t.fingerprint: t.capabilities for t in tasks},
    )


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(contest: Contest, rule: PromotionRule) -> PromotionDecision:
    if contest.champion is not None and contest.champion.id == contest.candidate.id:
        return PromotionDecision(False, 0.0, {}, (f"{contest.candidate.id} is the champion",))
    return decide_promotion(
        contest.candidate_report, contest.champion_report, rule, contest.capabilities
    )


@task(name="serve", cache_policy=NO_CACHE)
def serve_task(
    home: Path, settings: FlywheelSettings, candidate: ModelRecord, champion: ModelRecord | None
) -> Served:
    served = serve_model(home, settings.serving, candidate, fallback=champion)
    get_run_logger().info("%s answers at %s", served.model_id, served.endpoint)
    return served


@task(name="record", cache_policy=NO_CACHE)
def record_task(
    home: Path,
    settings: FlywheelSettings,
    record: DeploymentRecord,
    served: Served | None,
    fallback: ModelRecord | None,
) -> None:
    """Store the trace and move the aliases, in one transaction; when that fails after
    the endpoint changed, the endpoint goes back to ``fallback`` (or stops, with none)."""
    try:
        with Catalog.open(catalog_path(home)) as catalog:
            catalog.models.record_deployment(record)
    except BaseException:
        if served is not None and served.swapped:
            if fallback is not None:
                serve_model(home, settings.serving, fallback, fallback=None)
            else:
                ModelServer(home, settings.serving.port, settings.serving).stop()
        raise


@flow(name="rollback")
def rollback(reason: str = "rolled back on request", serve: bool | None = None) -> dict[str, Any]:
    """Make the previous champion the champion again, and serve it.

    Args:
        reason: Why, for the record.
        serve: Serve it on the model server. None: from the [deployment] settings.
    """
    settings = load_settings()
    record = run_rollback(
        settings, reason, serve=settings.deployment.serve if serve is None else serve
    )
    return record.model_dump(mode="json")


def run_rollback(settings: FlywheelSettings, reason: str, *, serve: bool) -> DeploymentRecord:
    """The body of ``rollback``; InvalidInputError naming ``previous`` without one."""
    home = settings.home
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        champion = catalog.models.alias(ModelAlias.CHAMPION)
        previous = catalog.models.alias(ModelAlias.PREVIOUS)
    if previous is None or champion is None:
        raise InvalidInputError(
            "previous", "nothing to roll back to: no previous champion is recorded"
        )
    served: Served | None = None
    outcome = DeploymentDecision.ROLLED_BACK
    reasons: tuple[str, ...] = (reason,)
    if _must_serve(settings, serve):
        try:
            served = serve_task(home, settings, previous, champion)
        except ServingError as exc:
            outcome, reasons = DeploymentDecision.FAILED, (reason, str(exc))
    record = DeploymentRecord(
        decision=outcome,
        candidate_id=previous.id,
        champion_id=champion.id,
        served_id=previous.id if outcome is DeploymentDecision.ROLLED_BACK else champion.id,
        reasons=reasons,
        candidate_report_id=previous.feedback_id,
        champion_report_id=champion.feedback_id,
        overall_gain=None,
        rule={},
        harness={"engine": settings.serving.engine},
        endpoint=served.endpoint if served else None,
        approver=None,
        flow_run_id=_run_id(),
        created_at=datetime.now(UTC),
    )
    record_task(home, settings, record, served, champion)
    if outcome is DeploymentDecision.FAILED:
        raise FlywheelError(f"rollback failed; {champion.id} stays the champion: {reasons[-1]}")
    return record


def _must_serve(settings: FlywheelSettings, serve: bool) -> bool:
    """Serve the new champion when asked to, and always when a model server runs: the
    endpoint must never serve another model than the registry's champion."""
    if serve:
        return True
    return ModelServer(settings.home, settings.serving.port, settings.serving).served() is not None


def resolve_model(registry: ModelRegistry, reference: str) -> ModelRecord:
    """The registered model ``reference`` names: an id, a name, ``latest`` or
    ``candidate``; InvalidInputError naming ``model`` otherwise."""
    models = registry.every()
    if reference == "latest":
        found = registry.latest()
    elif reference == ModelAlias.CANDIDATE.value:
        found = registry.alias(ModelAlias.CANDIDATE)
    else:
        found = next((m for m in models if reference in (m.id, m.name)), None)
    if found is None:
        known = [m.name for m in models[-5:]]
        raise InvalidInputError(
            "model",
            f"{reference!r} is not a registered model"
            + ("" if models else ": the registry is empty (train one with flywheel train)"),
            [*MODEL_REFERENCES[2:], *known],
        )
    return found


def _registered_report(home: Path, record: ModelRecord) -> FeedbackReport | None:
    if record.feedback_id is None:
        return None
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        return catalog.feedback.get(record.feedback_id)


def _approve(
    contest: Contest,
    decision: PromotionDecision,
    mode: ApprovalMode,
    settings: FlywheelSettings,
) -> tuple[DeploymentDecision, tuple[str, ...], str | None]:
    """The outcome before serving: refused by the gate, rejected or approved by a person."""
    if not decision.promote:
        return DeploymentDecision.REFUSED, decision.reasons, None
    if mode == "auto":
        return DeploymentDecision.PROMOTED, decision.reasons, AUTOMATIC
    form = PromotionForm.with_initial_data(
        description=_markdown(contest, decision.reasons)
        + "\n\nApprove to serve the candidate as the champion, or untick to keep the champion.",
        approve=True,
    )
    try:
        answer = pause_flow_run(
            wait_for_input=form,
            timeout=max(1, round(settings.deployment.timeout_s)),
            poll_interval=max(1, round(settings.approval.poll_s)),
            key=f"promote-{contest.candidate.id}",
        )
    except (FlowPauseTimeout, RuntimeError) as exc:
        raise FlywheelError(
            f"the promotion of {contest.candidate.id} was not approved or refused within "
            f"{settings.deployment.timeout_s:.0f} s ({type(exc).__name__}): nothing changed"
        ) from exc
    said = f"{answer.approver.strip()}: {answer.comment.strip() or 'no comment'}"
    if not answer.approve:
        return (
            DeploymentDecision.REJECTED,
            (*decision.reasons, f"rejected by {said}"),
            answer.approver,
        )
    return DeploymentDecision.PROMOTED, (*decision.reasons, f"approved by {said}"), answer.approver


def _trace(
    contest: Contest,
    decision: PromotionDecision,
    rule: PromotionRule,
    outcome: DeploymentDecision,
    reasons: tuple[str, ...],
    approver: str | None,
    served: Served | None,
    settings: FlywheelSettings,
) -> DeploymentRecord:
    champion_id = contest.champion.id if contest.champion else None
    promoted = outcome is DeploymentDecision.PROMOTED
    return DeploymentRecord(
        decision=outcome,
        candidate_id=contest.candidate.id,
        champion_id=champion_id,
        served_id=contest.candidate.id if promoted else champion_id,
        reasons=reasons,
        candidate_report_id=contest.candidate_report.id,
        champion_report_id=contest.champion_report.id if contest.champion_report else None,
        overall_gain=decision.overall_gain,
        overall_interval=(
            (decision.interval.low, decision.interval.high) if decision.interval else None
        ),
        rule={
            "min_overall_gain": rule.min_overall_gain,
            "max_capability_drop": rule.max_capability_drop,
            "min_interval_low": rule.min_interval_low,
            "confidence": rule.confidence,
        },
        harness={
            **contest.harness.to_json(),
            "development_tasks": contest.tasks,
            "reused_reports": list(contest.reused),
            "engine": settings.serving.engine,
            "served_max_new_tokens": settings.serving.max_new_tokens,
        },
        endpoint=served.endpoint if served else None,
        approver=approver,
        flow_run_id=_run_id(),
        created_at=datetime.now(UTC),
    )


def _run_id() -> str | None:
    return str(flow_run.get_id() or "") or None


def _markdown(contest: Contest, reasons: tuple[str, ...]) -> str:
    def cell(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    champion = contest.champion.name if contest.champion else "none"
    lines = [
        f"## Candidate `{contest.candidate.name}` against champion `{champion}`",
        "",
        f"{contest.tasks} development tasks; {contest.harness.samples} attempt(s) each, "
        + (
            f"at most {contest.harness.max_steps} steps."
            if contest.harness.max_steps is not None
            else "each within its task's own step budget."
        ),
        "",
        "| capability | candidate | champion |",
        "|---|---|---|",
    ]
    lines += [
        f"| {row['capability']} | {cell(row['candidate'])} | {cell(row['champion'])} |"
        for row in capability_rows(contest.candidate_report, contest.champion_report)
    ]
    lines += ["", *(f"- {reason}" for reason in reasons)]
    return "\n".join(lines)


def _publish(record: DeploymentRecord, contest: Contest) -> None:
    create_markdown_artifact(
        key="deployment-decision",
        markdown=f"# Deployment {record.id}: **{record.decision.value}**\n\n"
        + _markdown(contest, record.reasons)
        + f"\n\nServed: `{record.served_id or 'nothing'}` at {record.endpoint or 'no endpoint'}.",
        description="The candidate against the champion, and the decision",
    )
    create_table_artifact(
        key="deployment-scores",
        table=capability_rows(contest.candidate_report, contest.champion_report),
        description="Development-set success per capability: candidate and champion",
    )
