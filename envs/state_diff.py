"""What an episode changed: the row-level difference between two state snapshots, and
which of those changes a task allows (its collateral-damage check)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from contract import AllowedChange, ChangeOp
from envs.backend import Row, StateSnapshot


@dataclass(frozen=True)
class RowChange:
    """One row that differs: created (``after`` only), deleted (``before`` only), or
    updated (``before`` and ``after`` hold the fields that changed)."""

    collection: str
    entity_id: str
    op: ChangeOp
    before: Row | None
    after: Row | None

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(sorted({*(self.before or {}), *(self.after or {})}))

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "collection": self.collection,
            "id": self.entity_id,
            "op": self.op,
            "before": self.before,
            "after": self.after,
        }


def state_diff(initial: StateSnapshot, final: StateSnapshot) -> list[RowChange]:
    """Every row created, deleted or updated, ordered by collection and id."""
    changes: list[RowChange] = []
    for collection in sorted({*initial, *final}):
        before_rows = initial.get(collection, {})
        after_rows = final.get(collection, {})
        for entity_id in sorted({*before_rows, *after_rows}):
            before, after = before_rows.get(entity_id), after_rows.get(entity_id)
            if before is None and after is not None:
                changes.append(RowChange(collection, entity_id, "created", None, dict(after)))
            elif after is None and before is not None:
                changes.append(RowChange(collection, entity_id, "deleted", dict(before), None))
            elif before is not None and after is not None and before != after:
                changed = [f for f in sorted({*before, *after}) if before.get(f) != after.get(f)]
                changes.append(
                    RowChange(
                        collection,
                        entity_id,
                        "updated",
                        {f: before.get(f) for f in changed},
                        {f: after.get(f) for f in changed},
                    )
                )
    return changes


def allowances_for(changes: Iterable[RowChange], reason: str) -> list[AllowedChange]:
    """Allowances that cover exactly ``changes``: as many new rows per collection, each
    updated row's own fields, each deleted row."""
    created: Counter[str] = Counter()
    deleted: defaultdict[str, list[str]] = defaultdict(list)
    allowed: list[AllowedChange] = []
    for change in changes:
        if change.op == "created":
            created[change.collection] += 1
        elif change.op == "deleted":
            deleted[change.collection].append(change.entity_id)
        else:
            allowed.append(
                AllowedChange(
                    collection=change.collection,
                    op="updated",
                    ids=(change.entity_id,),
                    fields=change.fields,
                    reason=reason,
                )
            )
    allowed += [
        AllowedChange(collection=c, op="created", at_most=n, reason=reason)
        for c, n in sorted(created.items())
    ]
    allowed += [
        AllowedChange(collection=c, op="deleted", ids=tuple(ids), reason=reason)
        for c, ids in sorted(deleted.items())
    ]
    return allowed


def unexpected_changes(
    changes: Sequence[RowChange], allowed: Sequence[AllowedChange]
) -> list[RowChange]:
    """The changes no allowance covers. New rows beyond a collection's allowance are the
    ones created last (ids grow as rows are created)."""
    unexpected: list[RowChange] = []
    created: defaultdict[str, list[RowChange]] = defaultdict(list)
    for change in changes:
        if change.op == "created":
            created[change.collection].append(change)
        elif not any(_covers(a, change) for a in allowed):
            unexpected.append(change)
    for collection, rows in created.items():
        budget = _creation_budget(collection, allowed)
        if budget is not None and len(rows) > budget:
            unexpected += sorted(rows, key=lambda r: _id_order(r.entity_id))[budget:]
    return sorted(unexpected, key=lambda r: (r.collection, _id_order(r.entity_id)))


def _covers(allowance: AllowedChange, change: RowChange) -> bool:
    if allowance.collection != change.collection or allowance.op != change.op:
        return False
    if allowance.ids and change.entity_id not in allowance.ids:
        return False
    return not allowance.fields or set(change.fields) <= set(allowance.fields)


def _creation_budget(collection: str, allowed: Sequence[AllowedChange]) -> int | None:
    """How many new rows of ``collection`` are allowed (None: any number)."""
    total = 0
    for allowance in allowed:
        if allowance.collection == collection and allowance.op == "created":
            if allowance.at_most is None:
                return None
            total += allowance.at_most
    return total


def _id_order(entity_id: str) -> tuple[Any, ...]:
    """``ev-1002`` after ``ev-999``: the numeric suffix counts as a number."""
    head, _, tail = entity_id.rpartition("-")
    return (head, int(tail), "") if tail.isdigit() else (entity_id, -1, entity_id)
