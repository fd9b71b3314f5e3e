"""``flywheel datasets export``: a frozen dataset version in the shapes trainers read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer

from cli.identifiers import checked
from cli.output import EXPORT_FORMATS, choices, emit_json, table
from cli.rounds import JsonFlag, datasets_app
from contract import DATASET_ID
from training.settings import LATEST, resolve_dataset


@datasets_app.command("export")
def datasets_export(
    dataset_id: Annotated[
        str,
        typer.Argument(
            help="a dataset version id (ds-...), or 'latest'",
            callback=checked(DATASET_ID, LATEST),
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="the folder to write: new, empty, or --overwrite")
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            metavar=choices(EXPORT_FORMATS),
            help="hf: datasets' save_to_disk; parquet: one file a split",
        ),
    ] = "hf",
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="replace an earlier export in --out")
    ] = False,
    push_to_hub: Annotated[
        str | None,
        typer.Option("--push-to-hub", help="also upload to this dataset repository (owner/name)"),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="recompute every member's content id from its stored rows"),
    ] = False,
    chunk: Annotated[
        int | None,
        typer.Option(
            "--chunk",
            min=1,
            help="members a worker builds at once (default 10000); with [execution] runner "
            "ray, each chunk is a task of the cluster",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Export a dataset version: the sft split (tool-calling chats with a per-turn training
    mask), the rl_tasks split (task specs with seeds and verifiers) and a dataset card."""
    from contract import InvalidInputError
    from flows.execution import export_spread
    from flows.settings import load_settings
    from storage import Catalog
    from training.export import FORMATS, ExportFormat, export_dataset

    if fmt not in FORMATS:
        raise InvalidInputError("format", f"unknown export format {fmt!r}", FORMATS)
    settings = load_settings()
    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        report = export_dataset(
            catalog,
            resolve_dataset(dataset_id, catalog.datasets.latest_id, "DATASET_ID"),
            out,
            cast("ExportFormat", fmt),  # checked against FORMATS above
            overwrite=overwrite,
            push_to_hub=push_to_hub,
            verify=verify,
            chunk=chunk,
            spread=export_spread(settings),
        )
    if as_json:
        emit_json(report.to_json())
        return
    rows = [
        ("sft", f"{report.sft_rows} trajectories"),
        (
            "",
            f"{report.assistant_turns} assistant turns: {report.trained_turns} trained, "
            f"{report.masked_turns} masked; {report.corrected} corrected answers",
        ),
        ("rl_tasks", f"{report.rl_tasks} tasks"),
    ]
    lines = [
        f"Exported {report.dataset_id} ({report.format}) to {report.out_dir}",
        "",
        table(("split", "rows"), rows),
        "",
        "Files:",
        *(f"  {report.out_dir / name}" for name in report.files),
    ]
    if report.pushed_to:
        lines.append(f"Uploaded to the dataset repository {report.pushed_to}")
    typer.echo("\n".join(lines))
