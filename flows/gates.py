"""Human gates built from settings, and waiting for people without losing anything.

``build_gate`` is the one place that turns ``round.gate`` into a gate; ``sync_until``
submits items and pulls decisions until nothing is pending or the deadline passes.
Reviews are stored as they arrive (idempotent by id), so a crash or a Label Studio
restart while a round waits loses nothing and applies nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contract import InvalidInputError, Review
from flows.settings import FlywheelSettings
from human_gate import (
    GATES,
    AutoGate,
    GateItem,
    GateUnavailableError,
    HumanGate,
    Workplace,
)


def build_gate(name: str, settings: FlywheelSettings, *, start: bool = True) -> HumanGate:
    """The gate called ``name``: ``auto``, or ``label-studio`` (the local server started
    when ``start``, else one not running raises ServerError; it also serves the artifact
    store to the review page)."""
    if name == "auto":
        return AutoGate()
    if name == "label-studio":
        from flows.servers import label_studio_credentials
        from flows.servers.label_studio import label_studio_artifact_root
        from human_gate.label_studio import (
            LabelStudioGate,
            LabelStudioGateConfig,
            consensus_rule,
        )

        access = label_studio_credentials(settings.home, settings.label_studio, start=start)
        config = LabelStudioGateConfig(
            project_prefix=settings.gate.project_prefix,
            rule=consensus_rule(settings.gate.consensus),
            min_annotations=settings.gate.min_annotations,
            # The local server serves settings.artifacts_path (screenshots, page sources)
            # through a link in its document root; a remote one gets references as text.
            artifact_root=label_studio_artifact_root(settings.home, settings.label_studio),
            retry=settings.retries.label_studio,
        )
        return LabelStudioGate.connect(access.url, access.token, config)
    raise InvalidInputError("gate", f"unknown gate {name!r}", GATES)


def workplace_of(settings: FlywheelSettings, gate_name: str, round_id: str) -> Workplace | None:
    """Where people decide ``round_id``'s items: None when its gate asks no people or
    nothing of the round reached them. Nothing is started to find out: a Label Studio
    that is not running or does not answer raises GateUnavailableError saying so."""
    from flows.servers import ServerError

    try:
        return build_gate(gate_name, settings, start=False).workplace(round_id)
    except ServerError as exc:
        raise GateUnavailableError(str(exc)) from exc


@dataclass(frozen=True)
class SyncOutcome:
    reviews: tuple[Review, ...]
    pending: tuple[str, ...]
    syncs: int


def sync_until(
    gate: HumanGate,
    round_id: str,
    items: Sequence[GateItem],
    store: Callable[[Sequence[Review]], object],
    *,
    wait_s: float,
    poll_s: float,
    max_poll_s: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = lambda _: None,
) -> SyncOutcome:
    """Submit ``items`` (idempotent), then collect decisions and ``store`` them until
    nothing is pending or ``wait_s`` passed.

    An unreachable gate, at the submission or later, is waited for (with the same backoff)
    until the deadline, then its items count as pending: they are carried over, never
    approved silently.
    """
    deadline = clock() + wait_s
    delay, syncs, submitted = poll_s, 0, False
    reviews: tuple[Review, ...] = ()
    pending: tuple[str, ...] = tuple(i.trajectory_id for i in items)
    while True:
        try:
            if not submitted:
                gate.submit(round_id, items)
                submitted = True
            result = gate.collect(round_id, items)
            syncs += 1
            store(result.reviews)
            reviews, pending = result.reviews, result.pending
        except GateUnavailableError as exc:
            log(f"the gate is unavailable ({exc}); waiting")
        if not pending or clock() + delay > deadline:
            return SyncOutcome(reviews=reviews, pending=pending, syncs=syncs)
        log(f"{len(pending)} item(s) wait for a person; next sync in {delay:.0f} s")
        sleep(delay)
        delay = min(delay * 2, max_poll_s)
