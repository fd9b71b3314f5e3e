"""``flywheel plan show``: the plan the next round would use, and why it is what it is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.output import emit_json, table

if TYPE_CHECKING:
    from contract import GenerationPlan

plan_app = typer.Typer(
    rich_markup_mode="markdown", help="The generation plan of the next round.", no_args_is_help=True
)

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


@plan_app.command("show")
def plan_show(
    tasks: Annotated[
        int | None, typer.Option(min=1, help="new tasks in the round (default: settings)")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The next round's plan: quotas, repair sets, stored tasks collected again, tasks
    sent back to curation, and a table of every change against the even mix with its
    reason. It comes from the latest feedback report (``round.plan = "feedback"``)."""
    from flows.planning import next_plan
    from flows.settings import load_settings

    settings = load_settings()
    plan = next_plan(settings, settings.round.tasks if tasks is None else tasks)
    shown = plan_json(plan)
    if as_json:
        emit_json(shown)
        return
    typer.echo(f"Plan from {plan.source}: {plan.total} new tasks")
    rows = [(q["capability"], q["difficulty"], q["count"]) for q in shown["quotas"]]
    typer.echo("\n" + table(("capability", "difficulty", "tasks"), rows))
    if shown["changes"]:
        changes = [(c["what"], c["before"], c["after"], c["reason"]) for c in shown["changes"]]
        typer.echo("\n" + table(("change", "before", "after", "reason"), changes))
    else:
        typer.echo("\nThe even mix: no feedback changes it.")


def plan_json(plan: GenerationPlan) -> dict[str, Any]:
    """Every field of the plan, empty ones included, and its change table."""
    return {
        "source": plan.source,
        "total": plan.total,
        "quota_total": plan.quota_total,
        "repair_total": plan.repair_total,
        **{
            name: [item.model_dump(mode="json") for item in getattr(plan, name)]
            for name in ("quotas", "repairs", "replays", "preserve", "recurate", "template_weights")
        },
        "changes": [c.model_dump(mode="json") for c in plan.changes()],
    }
