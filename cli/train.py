"""``flywheel train`` and ``flywheel models``: the trainer flow and the model registry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, cast

import typer

from cli.output import emit_json, table
from cli.prefect import flow_runs, live_prefect_api, run_url
from storage import Catalog, DatasetStore
from training.settings import parse_assignments
from training.settings import resolve_dataset as resolve_latest

models_app = typer.Typer(
    rich_markup_mode="markdown", help="Trained models in the registry.", no_args_is_help=True
)

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


def resolve_dataset(datasets: DatasetStore, dataset: str) -> str:
    """``dataset``, with ``latest`` read as the catalog's newest frozen version."""
    return resolve_latest(dataset, datasets.latest_id, "--dataset")


def run_train_command(
    *,
    dataset: str,
    method: str | None,
    base: str | None,
    assignments: list[str],
    as_json: bool,
) -> None:
    """Run the ``trainer`` flow against the Prefect server and print what it made."""
    from flows.settings import load_settings
    from training.settings import TrainRequest

    settings = load_settings()
    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        dataset_id = resolve_dataset(catalog.datasets, dataset)
        catalog.datasets.get(dataset_id)  # an unknown id fails here, before any flow run
    values = {"dataset_id": dataset_id, **parse_assignments(assignments)}
    if method is not None:
        values["method"] = method
    if base is not None:
        values["base"] = base
    request = TrainRequest.of(values)  # bad values are named before any flow run exists
    api = live_prefect_api(settings)
    from flows.trainer import trainer  # torch and TRL load only for a run

    run_flow = cast("Callable[..., dict[str, Any]]", trainer)
    with flow_runs(settings, api):
        summary = run_flow(**{name: getattr(request, name) for name in TrainRequest.model_fields})
    summary["prefect_ui"] = run_url(api, summary["flow_run_id"])
    if as_json:
        emit_json(summary)
        return
    typer.echo(_summary_text(summary))


TRAINER_DEPLOYMENT = "train"
"""The deployment ``flywheel train --serve`` registers: ``trainer/train`` in the UI."""


def serve_trainer() -> None:
    """Register the ``trainer`` flow as a deployment and serve its runs until interrupted:
    the Prefect UI then starts training from the deployment's form."""
    from flows.servers import prefect_api
    from flows.settings import load_settings

    settings = load_settings()
    api = live_prefect_api(settings, announce=False)
    from flows.trainer import trainer  # torch and TRL load only to serve

    ui = api.removesuffix("/api")
    typer.echo(
        f"Serving trainer/{TRAINER_DEPLOYMENT}: start a run from {ui}/deployments "
        "(Run > Custom run: the dataset version, base, method, sft and rl). Ctrl-C stops.",
        err=True,
    )
    with prefect_api(api, settings.retries.prefect_api):
        trainer.serve(
            name=TRAINER_DEPLOYMENT,
            description="Train on a frozen dataset version: SFT and/or online RL with CARE, "
            "then the development set and the model registry.",
            tags=["flywheel", "training"],
            limit=1,  # one training run at a time on this machine
            print_starting_message=False,
        )


def _summary_text(summary: dict[str, Any]) -> str:
    overall = summary["overall"]
    scores = [(c, f"{s:.3f}") for c, s in summary["capability_scores"].items()]
    return "\n".join(
        [
            f"Model {summary['model_id']} ({summary['name']}) is registered.",
            f"Trained by {summary['method']} on {summary['dataset_id']}; weights: "
            f"{summary['path']}",
            f"Development set: Overall {_score(overall)}"
            + "".join(
                f", {part} templates {_score(value)}"
                for part, value in summary.get("parts", {}).items()
            )
            + f"; feedback report {summary['feedback_id']} (the next round plans from it).",
            str(summary.get("development_notes", "")),
            "",
            table(("capability", "success"), scores),
            "",
            f"Prefect UI (curves, plots, logs): {summary['prefect_ui']}",
            "Next: flywheel round (plans from this report); flywheel models list",
        ]
    )


@models_app.command("list")
def models_list(as_json: JsonFlag = False) -> None:
    """Registered models, oldest first: dataset, method, development Overall."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        models = catalog.models.every()
    items = [m.model_dump(mode="json") for m in models]
    if as_json:
        emit_json(items)
        return
    rows = [
        (
            m["id"],
            m["method"],
            m["dataset_id"],
            _overall(m["metrics"]),
            m["created_at"],
        )
        for m in items
    ]
    typer.echo(table(("model", "method", "dataset", "dev overall", "created"), rows))


@models_app.command("show")
def models_show(model_id: str, as_json: JsonFlag = False) -> None:
    """One model's lineage: dataset, base, method, hyperparameters, metrics, path."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        record = catalog.models.get(model_id)
    data = record.model_dump(mode="json")
    if as_json:
        emit_json(data)
        return
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _overall(metrics: dict[str, float]) -> str:
    value = metrics.get("dev_overall")
    return "-" if value is None else f"{value:.3f}"
