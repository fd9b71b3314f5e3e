"""``flywheel feedback ingest|list|show|schema``: reports that steer the next round."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.identifiers import checked
from cli.output import emit_json, table
from contract import FEEDBACK_ID

if TYPE_CHECKING:
    from contract import FeedbackReport

feedback_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Feedback reports: what training, evaluation and deployment reveal to the next round.",
    no_args_is_help=True,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]
_SHOWN_TASKS = 20


@feedback_app.command("ingest")
def feedback_ingest(
    path: Annotated[Path, typer.Argument(help="a feedback report (JSON, docs/feedback-report.md)")],
    as_json: JsonFlag = False,
) -> None:
    """Validate a feedback report and store it. Storing the same report again stores
    nothing; a malformed one is refused with the field it gets wrong."""
    from contract import FlywheelError, InvalidInputError, parse_feedback_report
    from flows.settings import load_settings
    from storage import Catalog

    settings = load_settings()
    limits = settings.feedback
    try:
        with path.open("rb") as source:  # never more than the limit, however large the file
            text = source.read(limits.max_report_bytes + 1)
    except OSError as exc:
        raise FlywheelError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        report = parse_feedback_report(
            text, max_bytes=limits.max_report_bytes, max_tasks=limits.max_tasks
        )
    except InvalidInputError as exc:
        raise FlywheelError(f"{path}: {exc}") from exc
    with Catalog.open(settings.catalog_path) as catalog:
        new = catalog.feedback.add(report)
    if as_json:
        emit_json(
            {
                "id": report.id,
                "new": new,
                "source": report.source.value,
                "created_at": report.created_at.isoformat(),
                "tasks": len(report.tasks),
            }
        )
        return
    if new:
        typer.echo(
            f"Stored feedback report {report.id} ({report.source.value}, "
            f"{len(report.tasks)} tasks, created {report.created_at.isoformat()})."
        )
    else:
        typer.echo(f"Feedback report {report.id} was stored before: nothing new stored.")


@feedback_app.command("list")
def feedback_list(as_json: JsonFlag = False) -> None:
    """Feedback reports, newest first (by when they were created)."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        items = [s.to_json() for s in reversed(catalog.feedback.summaries())]
    if as_json:
        emit_json(items)
        return
    rows = [
        (
            i["id"],
            i["created_at"],
            i["source"],
            i["produced_by"],
            i["model"] or "-",
            i["tasks"],
            "-" if i["overall"] is None else i["overall"],
        )
        for i in items
    ]
    headers = ("report", "created", "source", "produced by", "model", "tasks", "overall")
    typer.echo(table(headers, rows))


@feedback_app.command("show")
def feedback_show(
    report_id: Annotated[
        str, typer.Argument(help="a feedback report id (fb-...)", callback=checked(FEEDBACK_ID))
    ],
    as_json: JsonFlag = False,
) -> None:
    """One feedback report; with --json, the report as stored (it can be ingested again)."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        report = catalog.feedback.get(report_id)
    if as_json:
        emit_json(report.model_dump(mode="json"))
        return
    typer.echo(report_text(report))


@feedback_app.command("schema")
def feedback_schema() -> None:
    """Print the JSON Schema of the feedback report format."""
    from contract import feedback_report_schema

    emit_json(feedback_report_schema())


def report_text(report: FeedbackReport) -> str:
    """A feedback report for a person: scores, failures, cost, the least solved tasks."""
    lines = [
        f"Feedback report {report.id} (format {report.format_version})",
        f"{report.source.value} by {report.produced_by}"
        + (f" about {report.model}" if report.model else "")
        + f", created {report.created_at.isoformat()}",
    ]
    if report.overall is not None:
        lines.append(f"Overall: {report.overall:.3f}")
    if report.notes:
        lines.append(report.notes)
    scores = sorted((c.value, s) for c, s in report.capability_scores.items())
    lines += ["", table(("capability", "score"), scores)]
    if report.failure_counts:
        failures = sorted((f.value, n) for f, n in report.failure_counts.items())
        lines += ["", table(("failure type", "count"), failures)]
    cost = report.cost
    lines += [
        "",
        f"Mean cost {cost.mean_cost:.3f}; per attempt {cost.mean_steps:.2f} steps, "
        f"{cost.mean_tool_calls:.2f} tool calls, {cost.mean_output_tokens:.1f} output tokens",
    ]
    if report.tasks:
        ranked = sorted(report.tasks, key=lambda t: (t.success_rate, t.fingerprint))
        rows = [
            (
                t.fingerprint,
                t.attempts,
                t.successes,
                t.mean_cost,
                ", ".join(f"{f.value} {n}" for f, n in sorted(t.failures.items())) or "-",
            )
            for t in ranked[:_SHOWN_TASKS]
        ]
        lines += [
            "",
            f"{len(report.tasks)} tasks, least solved first:",
            table(("task", "attempts", "successes", "mean cost", "failures"), rows),
        ]
        if len(ranked) > _SHOWN_TASKS:
            lines.append(f"... {len(ranked) - _SHOWN_TASKS} more (--json prints them all)")
    return "\n".join(lines)
