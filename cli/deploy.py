"""``flywheel deploy``, ``flywheel loop`` and ``flywheel serve``: the deployment flow, the
closed loop, and the Prefect deployments that run them on a schedule or from the UI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from cli.identifiers import checked
from cli.output import COLLECTORS, emit_json, table
from cli.prefect import flow_runs, live_prefect_api, run_url
from contract import MODEL_REF, WORK_POOL, InvalidInputError

if TYPE_CHECKING:
    from flows.settings import FlywheelSettings

deploy_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Deploy a registered model (gate, approval, serving), roll back, read the records.",
)

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


@deploy_app.callback(invoke_without_command=True)
def deploy(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Option(
            help="a model id or name, 'latest' or 'candidate'", callback=checked(MODEL_REF)
        ),
    ] = "latest",
    min_gain: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="delta: Overall gain needed [default: settings]"),
    ] = None,
    max_drop: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="epsilon: capability drop allowed [default: settings]"),
    ] = None,
    approval: Annotated[
        str | None, typer.Option(help="auto, or person (the run pauses in the Prefect UI)")
    ] = None,
    serve: Annotated[
        bool | None,
        typer.Option(
            "--serve/--no-serve",
            help="start the model server for a promoted model (a running one always swaps)",
        ),
    ] = None,
    reevaluate: Annotated[
        bool, typer.Option(help="evaluate both models again even when reports exist")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Evaluate a registered model against the champion on the development set; promote
    and serve it if the gate allows; record the decision."""
    if ctx.invoked_subcommand is not None:
        return
    from flows.settings import APPROVAL_MODES, load_settings

    if approval is not None and approval not in APPROVAL_MODES:
        raise InvalidInputError("approval", f"unknown approval mode {approval!r}", APPROVAL_MODES)
    settings = load_settings()
    _check_model(settings, model)
    api = live_prefect_api(settings)
    from flows.deployment import deployment

    run_flow = cast("Callable[..., dict[str, Any]]", deployment)
    with flow_runs(settings, api):
        record = run_flow(
            model=model,
            min_overall_gain=min_gain,
            max_capability_drop=max_drop,
            approval=approval,
            serve=serve,
            reevaluate=reevaluate,
        )
    _print_record(record, api, as_json)


@deploy_app.command("rollback")
def deploy_rollback(
    reason: Annotated[str, typer.Option(help="why, for the record")] = "rolled back on request",
    as_json: JsonFlag = False,
) -> None:
    """Serve the previous champion again and make it the champion."""
    from flows.settings import load_settings

    settings = load_settings()
    api = live_prefect_api(settings)
    from flows.deployment import rollback

    with flow_runs(settings, api):
        record = cast("Callable[..., dict[str, Any]]", rollback)(reason=reason)
    _print_record(record, api, as_json)


@deploy_app.command("list")
def deploy_list(as_json: JsonFlag = False) -> None:
    """Every deployment decision, newest first."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        records = catalog.models.deployments()
    if as_json:
        emit_json([r.model_dump(mode="json") for r in records])
        return
    rows = [
        (
            r.id,
            f"{r.created_at:%Y-%m-%d %H:%M}",
            r.decision.value,
            r.candidate_id or "-",
            r.served_id or "-",
            "-" if r.overall_gain is None else f"{r.overall_gain:+.3f}",
        )
        for r in records
    ]
    headers = ("deployment", "at", "decision", "candidate", "served", "gain")
    typer.echo(table(headers, rows) if rows else "no deployments yet")


@deploy_app.command("show")
def deploy_show(deployment_id: str, as_json: JsonFlag = False) -> None:
    """One deployment's trace: models, reports, harness, endpoint, decision, reasons."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        record = catalog.models.deployment(deployment_id)
    if as_json:
        emit_json(record.model_dump(mode="json"))
        return
    typer.echo(_record_text(record.model_dump(mode="json")))


def run_loop_command(
    *,
    rounds: int,
    tasks: int | None,
    collect_with: str,
    teacher_share: float,
    champion_tasks: int | None = None,
    correct_failures: bool | None = None,
    assignments: list[str],
    as_json: bool,
) -> None:
    """Run the ``loop`` flow and print the table of its turns."""
    from flows.settings import load_settings
    from training.settings import RlSettings, SftSettings, TrainRequest, parse_assignments

    if collect_with not in COLLECTORS:
        raise InvalidInputError("collect-with", f"unknown value {collect_with!r}", COLLECTORS)
    values = parse_assignments(assignments)
    if "dataset_id" in values:
        raise InvalidInputError("--set", "dataset_id: each turn trains on its round's dataset")
    training = TrainRequest.of({"dataset_id": "latest", **values})  # each turn sets its own
    settings = load_settings()
    api = live_prefect_api(settings)
    from flows.loop import loop

    with flow_runs(settings, api):
        result = cast("Callable[..., dict[str, Any]]", loop)(
            rounds=rounds,
            tasks=tasks,
            collect_with=collect_with,
            teacher_share=teacher_share,
            champion_tasks=champion_tasks,
            correct_failures=correct_failures,
            base=training.base,
            method=training.method,
            # The fields given only: each turn fills the rest with its own start's
            # defaults, and a continuation's differ from the first turn's.
            sft=SftSettings.of(values.get("sft", {})),
            rl=RlSettings.of(values.get("rl", {})),
            dev_tasks=training.dev_tasks,
            dev_seed=training.dev_seed,
            eval_samples=training.eval_samples,
            seed=training.seed,
            parent_share=training.parent_share if "parent_share" in values else None,
        )
    page = run_url(api, result["flow_run_id"])
    if as_json:
        emit_json({**result, "prefect_ui": page})
        return
    turns = result["turns"]
    rows = [
        (
            t["turn"],
            t["round_id"],
            t["collected_by"],
            t["dataset_size"],
            _score(t.get("candidate_seen")),
            t["decision"] or t["note"],
            t["champion_id"] or "-",
            _score(t["overall"]),
            _score(t.get("overall_seen")),
            _score(t.get("overall_unseen")),
            _score(t["mean_cost"]),
            f"{t.get('minutes', 0.0):.1f}",
        )
        for t in turns
    ]
    headers = (
        "turn",
        "round",
        "collected by",
        "dataset",
        "candidate seen",
        "decision",
        "champion",
        "overall",
        "seen",
        "unseen",
        "mean cost",
        "minutes",
    )
    typer.echo(table(headers, rows))
    typer.echo(f"\nPlots per turn (the artifact 'loop-progress'): {page}")


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def serve_deployments() -> None:
    """Register the flywheel's deployments and serve their runs until interrupted."""
    from flows.settings import load_settings

    settings = load_settings()
    api = live_prefect_api(settings, announce=False)
    from prefect import serve

    from flows.deployments import flywheel_deployments
    from flows.servers import prefect_api

    ui = api.removesuffix("/api")
    schedule = settings.schedule
    typer.echo(
        f"Serving the flywheel's deployments at {ui}/deployments: flywheel_round/scheduled "
        f"(cron '{schedule.cron}' {schedule.timezone}"
        f"{'' if schedule.active else ', paused'}), trainer/train, deployment/deploy, "
        "rollback/rollback, loop/loop. Ctrl-C stops.",
        err=True,
    )
    with prefect_api(api, settings.retries.prefect_api):
        serve(*flywheel_deployments(settings), print_starting_message=False)


def _check_model(settings: FlywheelSettings, model: str) -> None:
    """An unknown model is named before any flow run exists."""
    from flows.deployment import resolve_model
    from storage import Catalog

    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        resolve_model(catalog.models, model)


def _print_record(record: dict[str, Any], api: str, as_json: bool) -> None:
    record = {**record, "prefect_ui": run_url(api, record.get("flow_run_id"))}
    if as_json:
        emit_json(record)
        return
    typer.echo(_record_text(record))


def _record_text(record: dict[str, Any]) -> str:
    gain = record["overall_gain"]
    lines = [
        f"Deployment {record['id']}: {record['decision']}.",
        f"Candidate: {record['candidate_id'] or '-'}; champion before: "
        f"{record['champion_id'] or 'none'}; served now: {record['served_id'] or 'nothing'}"
        + (f" at {record['endpoint']}" if record["endpoint"] else ""),
        f"Overall gain: {'n/a' if gain is None else f'{gain:+.3f}'}; approver: "
        f"{record['approver'] or '-'}",
        *(f"- {reason}" for reason in record["reasons"]),
    ]
    if record.get("prefect_ui"):
        lines.append(f"Prefect UI: {record['prefect_ui']}")
    return "\n".join(lines)


def register_in_pool(pool: str | None) -> None:
    """Register the flywheel's deployments in a process work pool (created when missing)."""
    from flows.settings import load_settings

    settings = load_settings()
    name = checked_pool(pool, settings.execution.work_pool)
    api = live_prefect_api(settings, announce=False)
    from flows.servers import prefect_api
    from flows.work_pools import register

    with prefect_api(api, settings.retries.prefect_api):
        registered = register(settings, name)
    ui = api.removesuffix("/api")
    typer.echo(f"Registered in the work pool {name!r}: {', '.join(registered)}.")
    typer.echo(f"Start a worker on each machine that runs them: flywheel worker --pool {name}")
    typer.echo(f"Runs and their workers: {ui}/work-pools/work-pool/{name}")


def run_worker(pool: str | None, limit: int | None) -> None:
    """Run a work pool's flow runs on this machine until interrupted."""
    from flows.settings import load_settings

    settings = load_settings()
    name = checked_pool(pool, settings.execution.work_pool)
    api = live_prefect_api(settings, announce=False)
    from flows.servers import prefect_api
    from flows.work_pools import work

    typer.echo(
        f"Worker of the work pool {name!r} at {api.removesuffix('/api')}: runs its flow "
        f"runs here, state folder {Path(settings.home).resolve()}. Ctrl-C stops.",
        err=True,
    )
    with prefect_api(api, settings.retries.prefect_api):
        work(settings, name, limit)


def checked_pool(pool: str | None, default: str) -> str:
    """``pool`` when given (by its shape, naming ``--pool``), else ``default``."""
    return default if pool is None else WORK_POOL.check("--pool", pool)
