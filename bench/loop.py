"""Benchmark: the flywheel loop itself, turn by turn, on the nano base.

Runs the ``loop`` flow (round → train → deploy, ``rounds`` times) on a fresh state folder
against the Prefect server of the usual one, and reports per turn what an ML team asks of
a flywheel: how long the turn took (wall and this process's CPU minutes), how large the
dataset version grew, how many rows SFT trained on and for how many epochs, the share of
RL groups that carried a signal, and the champion's development-set Overall on the seen
and the unseen templates with its scores per capability. The loop publishes the same
table and plots in the Prefect UI (``loop-progress``).

Figures, never pass or fail: the README's "The nano base" gives the measured ones.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from bench.machine import cpu_seconds, torch_processor, work_folder
from bench.report import cell
from contract import LOOP_DEV_TASKS, InvalidInputError
from flows.environment import scoped_environ
from flows.settings import load_settings
from training.settings import NANO, RlSettings, SftSettings

NANO_RL = {"updates": 8, "tasks_per_update": 2, "group_size": 4, "max_new_tokens": 64}

COLUMNS = (
    "turn",
    "minutes",
    "cpu_minutes",
    "dataset_size",
    "sft_rows",
    "sft_epochs",
    "informative_share",
    "candidate_seen",
    "overall_seen",
    "overall_unseen",
    "decision",
)


def run_loop_benchmark(
    rounds: int = 3,
    tasks: int = 2000,
    *,
    champion_tasks: int | None = 200,
    dev_tasks: int = LOOP_DEV_TASKS,
    base: str = NANO,
    sft: Mapping[str, Any] | None = None,
    rl: Mapping[str, Any] | None = None,
    parent_share: float | None = None,
    seed: int = 0,
    serving: Mapping[str, str] | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """``rounds`` turns of the loop on a fresh state folder; the figures per turn.

    ``workdir`` keeps that state folder (its catalog, every turn's model and evaluation)
    for a look afterwards; it must be empty or new, since a loop there would continue
    from what it holds. Without it, a temporary folder is removed at the end.

    ``dev_tasks`` is eight times the catalog's default. The gate's paired interval
    narrows as the square root of the tasks: over 480 it was ±0.022 to ±0.024 Overall
    where a third turn gained +0.02, and three such candidates were kept though one
    gained +0.073 [+0.048, +0.100] on 584 fresh tasks; over 960 it is ±0.013 to ±0.019
    (README, "A development set that resolves a third turn").

    ``seed`` is the first round's (each turn adds one) and training's: the same seed
    gives the same loop, another seed a replicate of it.
    """
    if workdir is not None and workdir.exists() and not _empty_folder(workdir):
        raise InvalidInputError(
            "workdir", f"{workdir} is not an empty folder; name an empty or a new one"
        )
    from flows.loop import loop
    from flows.servers import ModelServer, free_port, prefect_api, resolve_prefect_api

    sft_settings = SftSettings.of(dict(sft or {}))  # unset fields: the base's defaults
    rl_settings = RlSettings.of({**NANO_RL, **(rl or {})})
    server_home = load_settings().home  # the Prefect server of the usual state folder
    port = str(free_port())
    environment = {"FLYWHEEL_SERVING__PORT": port, **(serving or {})}
    with (
        work_folder(workdir, "flywheel-bench-loop-") as tmp,
        scoped_environ({"FLYWHEEL_HOME": str(tmp), **environment}),
    ):
        settings = load_settings()
        api = resolve_prefect_api(server_home, settings.prefect.port)
        cpu, started = cpu_seconds(), time.perf_counter()
        try:
            with prefect_api(api):
                result = cast("Callable[..., dict[str, Any]]", loop)(
                    rounds=rounds,
                    tasks=tasks,
                    champion_tasks=champion_tasks,
                    base=base,
                    dev_tasks=dev_tasks,
                    sft=sft_settings,
                    rl=rl_settings,
                    parent_share=parent_share,
                    seed=seed,
                )
        finally:
            ModelServer(tmp, int(port), settings.serving).stop()
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    return {
        "base": base,
        "rounds": rounds,
        "tasks": tasks,
        "champion_tasks": champion_tasks,
        "dev_tasks": dev_tasks,
        "parent_share": parent_share,
        "seed": seed,
        "minutes": round(wall / 60, 2),
        "cpu_minutes": round(cpu / 60, 2),
        "load_average": os.getloadavg()[0],
        "cpu": torch_processor(),
        "turns": result["turns"],
        "flow_run_id": result["flow_run_id"],
        "workdir": str(workdir) if workdir is not None else None,
    }


def _empty_folder(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _parent(share: float | None) -> str:
    return "" if share is None else f", parent share {share}"


def loop_table(figures: Mapping[str, Any]) -> str:
    """The figures as a text table, one line per turn, then the capabilities."""
    lines = [
        f"The loop on the {figures['base']} base: {figures['rounds']} turns of "
        f"{figures['tasks']} tasks ({figures['dev_tasks']} development tasks"
        f"{_parent(figures.get('parent_share'))}, seed {figures.get('seed', 0)}), "
        f"{figures['minutes']} min wall, "
        f"{figures['cpu_minutes']} min CPU (this process; load average "
        f"{figures['load_average']:.2f} at the end)",
        f"CPU: {figures['cpu']}",
        "",
        " | ".join(COLUMNS),
    ]
    for turn in figures["turns"]:
        lines.append(" | ".join(cell(turn.get(column)) for column in COLUMNS))
    lines += ["", "seen-templates success per capability:"]
    for turn in figures["turns"]:
        scores = ", ".join(f"{c} {v:.3f}" for c, v in sorted(turn["seen_scores"].items()))
        lines.append(f"  turn {turn['turn']}: {scores or '-'}")
    return "\n".join(lines)
