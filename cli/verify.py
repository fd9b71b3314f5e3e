"""``flywheel verify``: today's verifiers on stored trajectories, and the verdicts that
changed (``envs/sandbox/reverify.py``). Nothing stored is changed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Annotated

import typer

from cli.identifiers import checked
from cli.output import emit_json, table
from cli.rounds import JsonFlag
from contract import DATASET_ID, ROUND_ID, InvalidInputError
from envs.sandbox.reverify import Reverification


def verify_command(
    round_id: Annotated[
        str | None,
        typer.Option("--round", help="the trajectories of this round", callback=checked(ROUND_ID)),
    ] = None,
    dataset_id: Annotated[
        str | None,
        typer.Option(
            "--dataset", help="the members of this dataset version", callback=checked(DATASET_ID)
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Re-run today's verifiers on stored trajectories (a round's, or a dataset version's
    members) and report which ones changed verdict, with the checks that fail now."""
    from envs.sandbox import MobileSandbox
    from envs.sandbox.reverify import reverify
    from flows.settings import load_settings
    from storage import Catalog

    if (round_id is None) == (dataset_id is None):
        raise InvalidInputError("--round", "give exactly one of --round and --dataset")
    with Catalog.open(load_settings().catalog_path, read_only=True) as catalog:
        if round_id is not None:
            if catalog.rounds.get(round_id) is None:
                raise InvalidInputError("--round", f"no round {round_id!r} in the catalog")
            trajectories = catalog.trajectories.of_round(round_id)
        else:
            assert dataset_id is not None
            members = catalog.datasets.get(dataset_id).members
            trajectories = catalog.trajectories.by_ids([m.trajectory_id for m in members])
    sandbox = MobileSandbox()
    results = [reverify(t, sandbox) for t in trajectories]
    scope = {"round": round_id} if round_id is not None else {"dataset": dataset_id}
    if as_json:
        emit_json({**scope, **summary(results), "trajectories": [r.to_json() for r in results]})
        return
    typer.echo(report_text(results, f"round {round_id}" if round_id else f"dataset {dataset_id}"))


def summary(results: Sequence[Reverification]) -> dict[str, int]:
    statuses = Counter(r.status for r in results)
    return {
        "checked": len(results),
        "verified": statuses["verified"],
        "diverged": statuses["diverged"],
        "not_replayable": statuses["not_replayable"],
        "changed": sum(r.changed for r in results),
        "now_failing": sum(r.now_fails for r in results),
        "now_passing": sum(r.changed and bool(r.passed) for r in results),
    }


def report_text(results: Sequence[Reverification], scope: str) -> str:
    figures = summary(results)
    lines = [
        f"Re-verified {figures['checked']} trajectories of {scope} with today's verifiers: "
        f"{figures['changed']} changed verdict ({figures['now_failing']} now fail, "
        f"{figures['now_passing']} now pass); {figures['diverged']} replayed differently "
        f"and {figures['not_replayable']} cannot be replayed here (stored verdicts kept).",
    ]
    changed = [r for r in results if r.changed]
    if changed:
        rows = [
            (
                r.trajectory_id,
                r.template or "-",
                "passed" if r.stored_passed else "failed",
                "passed" if r.passed else "failed",
                "; ".join(c.description for c in r.failing()) or "-",
            )
            for r in changed
        ]
        lines += ["", table(("trajectory", "template", "stored", "now", "failing checks"), rows)]
    odd = [r for r in results if r.status != "verified"]
    lines += [f"  {r.trajectory_id}: {r.status}: {r.note}" for r in odd[:20]]
    return "\n".join(lines)
