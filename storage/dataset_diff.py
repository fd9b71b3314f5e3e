"""What changed between two dataset versions: membership, weights, reviews, composition.

Set-based SQL over ``dataset_members``: the cost grows with the versions' sizes, not with
the catalog's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import duckdb

from storage import datasets

_PAIR = """
    WITH a AS (SELECT * FROM dataset_members WHERE dataset_id = $a),
         b AS (SELECT * FROM dataset_members WHERE dataset_id = $b)
"""


class Delta(TypedDict):
    a: float
    b: float
    delta: float


class Membership(TypedDict):
    """Trajectory ids added and removed (and each one's reason), reweighted, with another
    review, and how many stayed as they were."""

    added: list[str]
    removed: list[str]
    additions: list[dict[str, Any]]
    removals: list[dict[str, Any]]
    reweighted: list[dict[str, Any]]
    review_changed: list[str]
    unchanged: int


class DatasetDiff(TypedDict):
    """What changed from version ``a`` to ``b``: ``composition`` and ``achieved`` per
    dimension and value; ``lineage`` says whether ``b`` descends from ``a`` and names the
    rounds."""

    a: str
    b: str
    size: Delta
    members: Membership
    composition: dict[str, dict[str, Delta]]
    achieved: dict[str, dict[str, Delta]]
    human_reviewed: Delta
    target_changed: bool
    lineage: dict[str, Any]


def diff(con: duckdb.DuckDBPyConnection, a: str, b: str) -> DatasetDiff:
    """A JSON-ready comparison of version ``a`` (before) with ``b`` (after)."""
    before, after = datasets.summary(con, a), datasets.summary(con, b)
    return {
        "a": a,
        "b": b,
        "size": _delta(before["size"], after["size"]),
        "members": _membership(con, a, b),
        "composition": {
            dimension: _value_deltas(before["counts"][dimension], after["counts"][dimension])
            for dimension in after["counts"]
        },
        "achieved": {
            dimension: _value_deltas(
                before["achieved"].get(dimension, {}), after["achieved"].get(dimension, {})
            )
            for dimension in sorted(set(before["achieved"]) | set(after["achieved"]))
        },
        "human_reviewed": _delta(before["human_reviewed"], after["human_reviewed"]),
        "target_changed": before["target"] != after["target"],
        "lineage": {
            "b_descends_from_a": a in _ancestors(con, b),
            "rounds": {"a": before["round_id"], "b": after["round_id"]},
        },
    }


def _membership(con: duckdb.DuckDBPyConnection, a: str, b: str) -> Membership:
    """Trajectories added, removed, reweighted, or with another review, and how many
    stayed as they were."""
    params = {"a": a, "b": b}
    added = _ids(
        con, f"{_PAIR} SELECT trajectory_id FROM b ANTI JOIN a USING (trajectory_id)", params
    )
    removed = _ids(
        con, f"{_PAIR} SELECT trajectory_id FROM a ANTI JOIN b USING (trajectory_id)", params
    )
    rows = con.execute(
        f"{_PAIR} SELECT trajectory_id, a.weight, b.weight, "
        "a.decision <> b.decision OR a.masked_steps <> b.masked_steps "
        "OR a.correction IS DISTINCT FROM b.correction "
        "FROM a JOIN b USING (trajectory_id) ORDER BY trajectory_id",
        params,
    ).fetchall()
    reweighted = [
        {"trajectory_id": t, "a": wa, "b": wb} for t, wa, wb, _ in rows if abs(wa - wb) > 1e-12
    ]
    reviewed = [t for t, _, _, changed in rows if changed]
    unchanged = sum(abs(wa - wb) <= 1e-12 and not changed for _, wa, wb, changed in rows)
    return {
        "added": added,
        "removed": removed,
        "additions": _additions(con, b, added),
        "removals": _removals(con, a, b, removed),
        "reweighted": reweighted,
        "review_changed": reviewed,
        "unchanged": unchanged,
    }


def _additions(con: duckdb.DuckDBPyConnection, b: str, added: list[str]) -> list[dict[str, Any]]:
    """Each added trajectory with why it joined: its round and the decision that let it
    in (by a person or automatically)."""
    if not added:
        return []
    rows = con.execute(
        "SELECT m.trajectory_id, t.round_id, m.decision, m.human FROM dataset_members m "
        "JOIN trajectories t ON t.id = m.trajectory_id "
        "WHERE m.dataset_id = ? AND list_contains(?, m.trajectory_id) ORDER BY 1",
        [b, added],
    ).fetchall()
    return [
        {
            "trajectory_id": trajectory_id,
            "round_id": round_id,
            "reason": f"{decision}d {'by a person' if human else 'automatically'}"
            + (f" in {round_id}" if round_id else ""),
        }
        for trajectory_id, round_id, decision, human in rows
    ]


def _removals(
    con: duckdb.DuckDBPyConnection, a: str, b: str, removed: list[str]
) -> list[dict[str, Any]]:
    """Each removed trajectory with the reason recorded by the version that removed it
    (``b`` or a version between ``a`` and ``b``); None when ``b`` does not descend from
    ``a`` through versions that recorded one."""
    if not removed:
        return []
    reasons: dict[str, dict[str, Any]] = {}
    for version in [b, *_ancestors(con, b)]:
        if version == a:
            break
        for removal in datasets.removals(con, version):
            reasons.setdefault(removal["trajectory_id"], {**removal, "dataset_id": version})
    return [
        reasons.get(t, {"trajectory_id": t, "reason": None, "detail": "", "dataset_id": None})
        for t in removed
    ]


def _ids(con: duckdb.DuckDBPyConnection, query: str, params: dict[str, str]) -> list[str]:
    return [str(t) for (t,) in con.execute(query + " ORDER BY 1", params).fetchall()]


def _ancestors(con: duckdb.DuckDBPyConnection, dataset_id: str) -> list[str]:
    """The chain of parents of ``dataset_id``, nearest first."""
    rows = con.execute(
        """WITH RECURSIVE chain(id, parent, depth) AS (
               SELECT id, parent, 0 FROM dataset_versions WHERE id = ?
               UNION ALL
               SELECT v.id, v.parent, c.depth + 1
               FROM dataset_versions v JOIN chain c ON v.id = c.parent
           )
           SELECT id FROM chain WHERE depth > 0 ORDER BY depth""",
        [dataset_id],
    ).fetchall()
    return [str(r) for (r,) in rows]


def _delta(a: float, b: float) -> Delta:
    return {"a": a, "b": b, "delta": b - a}


def _value_deltas(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, Delta]:
    return {v: _delta(a.get(v, 0), b.get(v, 0)) for v in sorted(set(a) | set(b))}
