"""``flywheel gate status|sync``: where a round's human review stands."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.identifiers import checked
from cli.output import emit_json, table
from contract import ROUND_ID

if TYPE_CHECKING:
    from flows.settings import FlywheelSettings
    from human_gate import GateItem
    from storage import Catalog, RoundInfo, RoundStore

gate_app = typer.Typer(
    rich_markup_mode="markdown", help="The human gate of a round.", no_args_is_help=True
)

RoundOpt = Annotated[
    str | None,
    typer.Option(
        "--round",
        help="round id (default: the newest round gated in Label Studio, else the newest)",
        callback=checked(ROUND_ID),
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


@gate_app.command("status")
def gate_status(round_id: RoundOpt = None, as_json: JsonFlag = False) -> None:
    """Decisions of the round's kept items: pending, approved, corrected, rejected,
    quarantined, carried over (pending when the round ended), decided since and waiting
    to join a version; and where people decide them (a Label Studio project's URL)."""
    _show(_status(round_id), as_json)


@gate_app.command("sync")
def gate_sync(round_id: RoundOpt = None, as_json: JsonFlag = False) -> None:
    """Pull the annotations of the round's undecided items now, store them, and print the
    status (and which dataset version the decisions join)."""
    from cli.prefect import live_prefect_api
    from flows.gates import build_gate
    from flows.servers import prefect_api
    from flows.settings import load_settings
    from storage import Catalog

    settings = load_settings()
    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        info = _round(catalog.rounds, round_id)
    # The Label Studio token may live in a Prefect Secret block: then Prefect is asked.
    api = (
        prefect_api(live_prefect_api(settings, announce=False))
        if settings.label_studio.token_block
        else nullcontext()
    )
    with api, Catalog.open(settings.catalog_path) as catalog:
        gate = build_gate(str(info.config.get("gate", "auto")), settings)
        for items in undecided_items(catalog, info.id):
            catalog.reviews.add(gate.collect(info.id, items).reviews)
    _show(_status(info.id), as_json)


def undecided_items(catalog: Catalog, round_id: str) -> Iterator[list[GateItem]]:
    """The round's kept items without a decision, as gate items, ``PEOPLE_BATCH`` at a
    time, found a batch of suggestions at a time (``kept_batches``): a large round is
    never read whole."""
    from more_itertools import chunked

    from flows.round_stages import PEOPLE_BATCH, gate_items, kept_batches

    for kept in kept_batches(catalog.reviews, round_id):
        decided = catalog.reviews.final_reviews([k.trajectory_id for k in kept])
        open_ids = [k.trajectory_id for k in kept if k.trajectory_id not in decided]
        for ids in chunked(open_ids, PEOPLE_BATCH):
            yield gate_items(catalog.trajectories.by_ids(ids), catalog.reviews.curations_of(ids))


def _status(round_id: str | None) -> dict[str, Any]:
    """Counted by the catalog (no record is read: a round of any size)."""
    from flows.settings import load_settings
    from storage import Catalog

    settings = load_settings()
    with Catalog.open(settings.catalog_path, read_only=True) as catalog:
        info = _round(catalog.rounds, round_id)
        counts = catalog.rounds.gate_counts(info.id)
        waiting = catalog.reviews.decided_since_carried(info.id)
    done = info.status == "done"
    return {
        "round_id": info.id,
        "pending": 0 if done else counts.undecided,
        "approved": counts.decisions["approve"],
        "corrected": counts.decisions["correct"],
        "rejected": counts.decisions["reject"],
        "quarantined": counts.decisions["quarantine"],
        "carried_over": counts.undecided if done else 0,
        "waiting_to_join": waiting,
        "human_reviewed": counts.human,
        "workplace": _workplace(settings, str(info.config.get("gate", "auto")), info.id),
    }


def _workplace(settings: FlywheelSettings, gate: str, round_id: str) -> dict[str, str] | None:
    """Where people decide the round's items (``name``, ``url``), why that is not known
    (``problem``), or None when its gate asks no people."""
    from flows.gates import workplace_of
    from human_gate import GateUnavailableError

    if gate == "auto":
        return None
    try:
        where = workplace_of(settings, gate, round_id)
    except GateUnavailableError as exc:
        return {"problem": str(exc)}
    if where is None:
        return {"problem": "nothing of the round was sent to people"}
    return {"name": where.name, "url": where.url}


def _round(store: RoundStore, round_id: str | None) -> RoundInfo:
    from contract import InvalidInputError

    rounds = store.every()
    if round_id is None:
        return newest_gated(rounds)
    for info in rounds:
        if info.id == round_id:
            return info
    recent = [r.id for r in sorted(rounds, key=lambda r: r.started_at, reverse=True)[:5]]
    raise InvalidInputError("round", f"unknown round {round_id!r}", recent)


def newest_gated(rounds: Sequence[RoundInfo]) -> RoundInfo:
    """The round a person most likely means: the newest one whose items went to Label
    Studio (where the work is), else the newest of all."""
    from contract import InvalidInputError

    if not rounds:
        raise InvalidInputError("round", "the catalog has no round yet: run a round first")
    people = [r for r in rounds if r.config.get("gate") == "label-studio"]
    return max(people or rounds, key=lambda r: r.started_at)


def _show(status: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(status)
        return
    typer.echo(f"Gate of {status['round_id']}")
    rows = [(k, v) for k, v in status.items() if isinstance(v, int)]
    typer.echo(table(("decision", "items"), rows))
    where = status["workplace"]
    if where:
        place = f"{where['name']}: {where['url']}" if "url" in where else where["problem"]
        typer.echo(f"\nWhere people decide: {place}")
    if status["carried_over"]:
        typer.echo(
            f"\n{status['carried_over']} item(s) were undecided when the round ended: they are "
            "asked about again in the next round's gate, and what people decide joins that "
            "round's dataset version (this round's version is frozen)."
        )
    if status["waiting_to_join"]:
        typer.echo(
            f"\n{status['waiting_to_join']} decision(s) made since the round ended wait to "
            "join a dataset version: the next round with this gate takes them in. Build it "
            "now: flywheel round --gate label-studio"
        )
