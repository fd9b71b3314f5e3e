"""``flywheel round``, ``flywheel rounds`` and ``flywheel datasets``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from cli.identifiers import checked
from cli.output import emit_json, table
from contract import DATASET_ID, moment
from training.settings import LATEST, resolve_dataset

if TYPE_CHECKING:
    from flows.round_stages import RoundSummary
    from storage.dataset_diff import DatasetDiff
    from storage.datasets import DatasetDescription

rounds_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Flywheel rounds recorded in the catalog.",
    no_args_is_help=True,
)
datasets_app = typer.Typer(
    rich_markup_mode="markdown", help="Frozen dataset versions.", no_args_is_help=True
)

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


ROUND_BACKENDS = ("sandbox", "bfcl")
"""Where a round's tasks come from (``--backend``); a mix is ``--bfcl-share``."""


def round_bfcl_share(backend: str | None, share: float | None) -> float | None:
    """BFCL's share of a round from ``--backend`` and ``--bfcl-share`` (None: the
    settings'); a backend that contradicts the share is refused."""
    from contract import InvalidInputError

    if backend is None:
        return share
    if backend not in ROUND_BACKENDS:
        raise InvalidInputError("backend", f"unknown backend {backend!r}", ROUND_BACKENDS)
    implied = 1.0 if backend == "bfcl" else 0.0
    if share is not None and share != implied:
        raise InvalidInputError(
            "bfcl_share",
            f"--backend {backend} takes all the tasks from "
            f"{'BFCL' if implied else 'the sandbox'}; for a mixed round give --bfcl-share "
            "alone",
            [str(implied)],
        )
    return implied


def run_round_command(
    *,
    tasks: int | None,
    seed: int | None,
    policy: str | None,
    fault_rate: float | None,
    backend_fault_rate: float | None,
    gate: str | None,
    approval: str | None,
    round_id: str | None,
    as_json: bool,
    devices: str | None = None,
    bfcl_share: float | None = None,
    simulated_share: float | None = None,
) -> None:
    """Run ``flywheel_round`` against the Prefect server and print what it made."""
    from cli.prefect import flow_runs, live_prefect_api, run_url
    from contract import InvalidInputError
    from flows.policies import POLICIES
    from flows.round import flywheel_round
    from flows.settings import APPROVAL_MODES, DEVICE_ROUTES, load_settings
    from human_gate import GATES
    from storage import Catalog

    if policy is not None and policy not in POLICIES:
        raise InvalidInputError("policy", f"unknown policy {policy!r}", POLICIES)
    if gate is not None and gate not in GATES:
        raise InvalidInputError("gate", f"unknown gate {gate!r}", GATES)
    if approval is not None and approval not in APPROVAL_MODES:
        raise InvalidInputError("approval", f"unknown approval mode {approval!r}", APPROVAL_MODES)
    if devices is not None and devices not in DEVICE_ROUTES:
        raise InvalidInputError("devices", f"unknown device route {devices!r}", DEVICE_ROUTES)
    settings = load_settings()
    with Catalog.open(settings.catalog_path):
        pass  # a bad state folder or catalog fails here, before any flow run exists
    api = live_prefect_api(settings)
    run_flow = cast("Callable[..., RoundSummary]", flywheel_round)  # the flow validates
    with flow_runs(settings, api):
        summary = run_flow(
            tasks=tasks,
            seed=seed,
            policy=policy,
            fault_rate=fault_rate,
            backend_fault_rate=backend_fault_rate,
            gate_name=gate,
            approval=approval,
            round_id=round_id,
            devices=devices,
            bfcl_share=bfcl_share,
            simulated_share=simulated_share,
        )
    page = run_url(api, summary.flow_run_id)
    if as_json:
        emit_json(summary.model_dump(mode="json") | {"prefect_ui": page})
        return
    typer.echo(_round_text(summary, page))
    if summary.dataset_version:
        with Catalog.open(settings.catalog_path, read_only=True) as catalog:
            dataset = catalog.datasets.describe(summary.dataset_version)
        typer.echo("\n" + dataset_text(dataset))
        typer.echo(f"\nAgain any time: flywheel datasets show {summary.dataset_version}")


CAPABILITY_NOTE = (
    "(a task exercising several capabilities counts in each of their rows: "
    "a column can add up to more than its total)"
)
ACHIEVED_NOTE = (
    "(shares of the version's sampling weight, which the balancer raked towards the "
    "target; counts of trajectories are above)"
)


def _round_text(summary: RoundSummary, run_url: str) -> str:
    counts = summary.counts
    lines = [
        f"Round {summary.round_id} is done.",
        f"Dataset version: {summary.dataset_version or 'none'}",
        _approval_text(summary.approval),
        "",
        table(("stage", "count"), list(counts.items())),
        "",
        table(
            ("capability", "tasks", "trajectories", "successes", "approved", "in dataset"),
            [tuple(row.model_dump().values()) for row in summary.capabilities],
        ),
        CAPABILITY_NOTE,
        "",
        f"Prefect UI (flow run, its tasks, logs and the summary artifacts): {run_url}",
    ]
    if summary.waiting:
        lines[3:3] = ["", f"Waiting for people: {summary.waiting.text()}"]
    return "\n".join(lines)


def _approval_text(approval: dict[str, Any] | None) -> str:
    if approval is None:
        return "Nothing was approved by the gate: no version was proposed."
    how = "automatically" if approval["automatic"] else f"by {approval['approver']}"
    return f"Proposal {approval['dataset_id']} {approval['decision']}d {how}."


@rounds_app.command("list")
def rounds_list(as_json: JsonFlag = False) -> None:
    """Rounds, newest first: status, last finished stage, dataset version."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        rounds = catalog.rounds.every()
    items = [
        {
            "id": r.id,
            "status": r.status,
            "stage": r.stage,
            "dataset_id": r.dataset_id,
            "flow_run_id": r.flow_run_id,
            "counts": r.counts,
            "started_at": _iso(r.started_at),
            "finished_at": _iso(r.finished_at),
        }
        for r in rounds
    ]
    if as_json:
        emit_json(items)
        return
    rows = [(i["id"], i["status"], i["stage"] or "-", i["dataset_id"] or "-") for i in items]
    typer.echo(table(("round", "status", "last stage", "dataset"), rows))


@datasets_app.command("list")
def datasets_list(as_json: JsonFlag = False) -> None:
    """Dataset versions, newest first."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        items = [
            catalog.datasets.describe(d.id)
            for d in sorted(catalog.datasets.summaries(), key=lambda d: d.created_at, reverse=True)
        ]
    if as_json:
        emit_json(items)
        return
    rows = [
        (i["id"], i["round_id"], i["size"], i["human_reviewed"], i["parent"] or "-") for i in items
    ]
    typer.echo(table(("dataset", "round", "size", "human reviewed", "parent"), rows))


@datasets_app.command("show")
def datasets_show(
    dataset_id: Annotated[
        str,
        typer.Argument(
            help="a dataset version id (ds-...), or 'latest'",
            callback=checked(DATASET_ID, LATEST),
        ),
    ],
    as_json: JsonFlag = False,
) -> None:
    """One dataset version: composition, achieved vs target mix, lineage; and how many
    decisions people made since, on items carried over, wait to join the next version."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        datasets = catalog.datasets
        summary = datasets.describe(resolve_dataset(dataset_id, datasets.latest_id, "DATASET_ID"))
        waiting = catalog.reviews.decided_since_carried()
    if as_json:
        emit_json({**summary, "decisions_waiting_to_join": waiting})
        return
    typer.echo(dataset_text(summary))
    if waiting:
        typer.echo(
            f"\n{waiting} decision(s) made in the gate on items carried over wait to join a "
            "dataset version (not this one: it is frozen); the next round with their gate "
            "takes them in. Build it now: flywheel round --gate label-studio"
        )


@datasets_app.command("diff")
def datasets_diff(
    a: Annotated[
        str,
        typer.Argument(help="the earlier dataset version (ds-...)", callback=checked(DATASET_ID)),
    ],
    b: Annotated[
        str,
        typer.Argument(
            help="the later dataset version (ds-...), or 'latest'",
            callback=checked(DATASET_ID, LATEST),
        ),
    ],
    as_json: JsonFlag = False,
) -> None:
    """What changed from version A to B: members, weights, reviews, composition."""
    from flows.settings import load_settings
    from storage import Catalog

    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        datasets = catalog.datasets
        changes = datasets.diff(a, resolve_dataset(b, datasets.latest_id, "B"))
    if as_json:
        emit_json(changes)
        return
    typer.echo(diff_text(changes))


def diff_text(changes: DatasetDiff) -> str:
    members = changes["members"]
    size = changes["size"]
    lines = [
        f"{changes['a']} -> {changes['b']}: {size['a']} -> {size['b']} trajectories "
        f"({size['delta']:+d})",
        f"{len(members['added'])} added, {len(members['removed'])} removed, "
        f"{len(members['reweighted'])} reweighted, {len(members['review_changed'])} with "
        f"another review, {members['unchanged']} unchanged",
        "B descends from A"
        if changes["lineage"]["b_descends_from_a"]
        else "B does not descend from A",
    ]
    if changes["target_changed"]:
        lines.append("The target mix changed.")
    lines += _reasons("added", members.get("additions", []))
    lines += _reasons("removed", members.get("removals", []))
    rows = [
        (dimension, value, d["a"], d["b"], f"{d['delta']:+d}")
        for dimension, values in changes["composition"].items()
        for value, d in values.items()
    ]
    lines += ["", table(("dimension", "value", "A", "B", "change"), rows)]
    return "\n".join(lines)


def _reasons(what: str, changes: list[dict[str, Any]]) -> list[str]:
    """How many trajectories were ``what`` for each reason, most first."""
    counts = Counter(
        f"{c['reason']}" + (f" ({c['detail']})" if c.get("detail") else "")
        if c["reason"]
        else "no reason recorded (B does not descend from A through versions that record one)"
        for c in changes
    )
    return [f"  {what}: {n} {reason}" for reason, n in counts.most_common()]


def dataset_text(summary: DatasetDescription) -> str:
    lines = [
        f"Dataset {summary['id']} (round {summary['round_id']}, parent "
        f"{summary['parent'] or 'none'})",
        f"{summary['size']} trajectories; {summary['human_reviewed']} reviewed by a person",
    ]
    if summary.get("parent"):
        lines.append(
            f"{summary.get('inherited', 0)} carried from the parent, "
            f"{summary.get('removed', 0)} of the parent's members removed "
            "(`flywheel datasets diff` gives the reasons)"
        )
    review = summary.get("review") or {}
    if review:
        lines.append(
            f"{review['corrected']} corrected, {review['with_masked_steps']} with steps "
            "masked out of the SFT loss"
        )
    approval = summary.get("approval")
    if approval:
        who = "automatically" if approval["automatic"] else f"by {approval['approver']}"
        comment = f": {approval['comment']}" if approval.get("comment") else ""
        lines.append(f"Approved {who} at {moment(approval['decided_at'])}{comment}")
    for dimension, counts in summary["counts"].items():
        lines += ["", table((dimension, "trajectories"), sorted(counts.items()))]
    achieved: dict[str, dict[str, float]] = summary.get("achieved") or {}
    targets = _targets(summary.get("target") or {})
    rows = []
    for dimension, shares in achieved.items():
        for value, share in sorted(shares.items()):
            goal = targets.get(dimension, {}).get(value)
            rows.append((dimension, value, f"{share:.3f}", "-" if goal is None else f"{goal:.3f}"))
    if rows:
        header = ("dimension", "value", "achieved share", "target share")
        lines += ["", table(header, rows), ACHIEVED_NOTE]
    return "\n".join(lines)


def _targets(target: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Target shares per dimension; ``recovery_share`` is the outcome dimension's."""
    out = {k: v for k, v in target.items() if isinstance(v, dict) and v}
    share = target.get("recovery_share")
    if isinstance(share, int | float):
        out["outcome"] = {"recovery": float(share), "success": 1.0 - float(share)}
    return out


def _iso(value: object) -> str | None:
    return None if value is None else str(value)
