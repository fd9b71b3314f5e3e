"""Benchmark: how far apart one recipe's models land when only the training seed differs.

One round (the settings' policy: the scripted teacher by default) freezes a version on a
fresh state folder, as a loop's first turn does; the trainer then trains on that version
once per seed (the seed draws the base's weights, the order of the batches, the rows whose
values are swapped, and RL's samples) and evaluates each model on the same development
set. Reported per seed: the development Overall on the seen and unseen templates, the
seen part per capability, SFT epochs, the share of informative RL groups, minutes. Across
the seeds: the seen Overall's mean, standard deviation and range; how many seen
development tasks every seed's model solved, some solved and none solved; the seen
templates whose draws the seeds solved in different numbers; and what the
promotion gate (the deployment settings' rule) says of each later seed's model against
the first seed's as the champion.

Why: a turn of the loop is judged by one training run. Where runs of one recipe differ by
more than the gain a turn looks for, the gate promotes or refuses a retrain on its seed
alone, and one loop run's turn-by-turn figures cannot tell whether a turn helped.

Figures, never pass or fail: the README's "The nano base" gives the measured ones.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from bench.loop import NANO_RL
from bench.machine import cpu_seconds, torch_processor
from bench.report import cell
from contract import FeedbackReport, FlywheelError, TaskSpec
from envs.sandbox.templates.development import Part, part_of
from flows.environment import scoped_environ
from flows.settings import catalog_path, load_settings
from storage import Catalog
from training.development_weights import development_concentration
from training.evaluate import development_tasks
from training.promotion import PromotionRule, decide_promotion
from training.settings import NANO, RlSettings, SftSettings


def run_seeds_benchmark(
    seeds: int = 3,
    tasks: int = 2000,
    *,
    dev_tasks: int = 240,
    base: str = NANO,
    sft: Mapping[str, Any] | None = None,
    rl: Mapping[str, Any] | None = None,
    round_seed: int = 0,
    api: str | None = None,
) -> dict[str, Any]:
    """One round of ``tasks`` tasks (seeded ``round_seed``) on a fresh state folder, then
    the trainer on its version with seeds ``0 .. seeds-1``; the figures (module
    docstring). ``api``: the Prefect server's API (None: the usual state folder's)."""
    from flows.deployment import promotion_rule
    from flows.round import flywheel_round
    from flows.servers import prefect_api, resolve_prefect_api
    from flows.trainer import trainer  # torch and TRL load only here

    sft_settings = SftSettings.of(dict(sft or {}))  # unset fields: the base's defaults
    rl_settings = RlSettings.of({**NANO_RL, **(rl or {})})
    server = load_settings()  # the Prefect server of the usual state folder
    train = cast("Callable[..., dict[str, Any]]", trainer)
    with (
        tempfile.TemporaryDirectory(prefix="flywheel-bench-seeds-") as tmp,
        scoped_environ({"FLYWHEEL_HOME": tmp}),
    ):
        settings = load_settings()
        url = api or resolve_prefect_api(server.home, server.prefect.port)
        cpu, started = cpu_seconds(), time.perf_counter()
        runs: list[dict[str, Any]] = []
        with prefect_api(url):
            summary = flywheel_round(tasks=tasks, seed=round_seed)
            dataset_id = summary.dataset_version
            if dataset_id is None:
                raise FlywheelError(
                    f"round {summary.round_id} froze no dataset version: nothing to train on"
                )
            for seed in range(seeds):
                run_cpu, run_started = cpu_seconds(), time.perf_counter()
                trained = train(
                    dataset_id=dataset_id,
                    base=base,
                    sft=sft_settings,
                    rl=rl_settings,
                    dev_tasks=dev_tasks,
                    seed=seed,
                )
                runs.append(
                    {
                        "seed": seed,
                        "model_id": trained["model_id"],
                        "feedback_id": trained["feedback_id"],
                        "sft_epochs": trained["metrics"].get("sft_epochs"),
                        "informative_share": trained["metrics"].get("rl_informative_share"),
                        "minutes": round((time.perf_counter() - run_started) / 60, 2),
                        "cpu_minutes": round((cpu_seconds() - run_cpu) / 60, 2),
                    }
                )
        with Catalog.open(catalog_path(settings.home), read_only=True) as catalog:
            reports = [catalog.feedback.get(run["feedback_id"]) for run in runs]
            development = development_tasks(catalog)
        rule = promotion_rule(settings.deployment)
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    for run, report in zip(runs, reports, strict=True):
        run.update(_scores(report))
    return {
        "base": base,
        "tasks": tasks,
        "round_seed": round_seed,
        "dataset_id": dataset_id,
        "dataset_size": summary.counts.get("in_dataset", 0),
        "dev_tasks": len(development),
        "seen_concentration": development_concentration(development)["seen"]["overall"].to_json(),
        "minutes": round(wall / 60, 2),
        "cpu_minutes": round(cpu / 60, 2),
        "load_average": os.getloadavg()[0],
        "cpu": torch_processor(),
        "runs": runs,
        **seed_spread(reports, development, rule),
    }


def seed_spread(
    reports: Sequence[FeedbackReport], tasks: Sequence[TaskSpec], rule: PromotionRule
) -> dict[str, Any]:
    """Across ``reports`` (one per seed, on the development set ``tasks``): the seen
    Overall's mean, standard deviation (of a sample) and range; the seen tasks every
    report solved, some solved and none solved; and the gate's decision on each later
    report against the first as the champion's."""
    if len(reports) < 2:
        raise ValueError(f"a spread needs at least two runs, not {len(reports)}")
    seen_overall = [_part_overall(report, "seen") for report in reports]
    seen = {t.fingerprint for t in tasks if part_of(t) == "seen"}
    solved = [{t.fingerprint for t in r.tasks if t.successes} & seen for r in reports]
    times = [sum(fp in s for s in solved) for fp in sorted(seen)]
    capabilities = {t.fingerprint: t.capabilities for t in tasks}
    gate = []
    for report in reports[1:]:
        decision = decide_promotion(report, reports[0], rule, capabilities)
        interval = decision.interval
        gate.append(
            {
                "gain": decision.overall_gain,
                "low": None if interval is None else interval.low,
                "high": None if interval is None else interval.high,
                "promote": decision.promote,
            }
        )
    return {
        "seen": {
            "mean": statistics.fmean(seen_overall),
            "sd": statistics.stdev(seen_overall),
            "min": min(seen_overall),
            "max": max(seen_overall),
        },
        "seen_tasks": {
            "of": len(seen),
            "every": sum(n == len(reports) for n in times),
            "some": sum(0 < n < len(reports) for n in times),
            "none": sum(n == 0 for n in times),
        },
        "unsettled_templates": _unsettled_templates(tasks, solved),
        "gate_against_first": gate,
    }


def _unsettled_templates(
    tasks: Sequence[TaskSpec], solved: Sequence[set[str]]
) -> list[dict[str, Any]]:
    """The seen templates whose development tasks the seeds' models solved in different
    numbers, most draws first: each with its capability, its draws and the tasks each
    seed solved: where the seeds' Overall differs, and by how much a template's draws
    weigh in it."""
    draws: dict[str, list[TaskSpec]] = {}
    for task in tasks:
        if part_of(task) == "seen":
            draws.setdefault(task.template or "-", []).append(task)
    rows = []
    for template, drawn in draws.items():
        counts = [sum(t.fingerprint in s for t in drawn) for s in solved]
        if len(set(counts)) > 1:
            rows.append(
                {
                    "template": template,
                    "capability": drawn[0].capabilities[0].value,
                    "draws": len(drawn),
                    "solved": counts,
                }
            )
    return sorted(rows, key=lambda row: (-row["draws"], row["template"]))


def _scores(report: FeedbackReport) -> dict[str, Any]:
    seen = report.parts.get("seen")
    return {
        "overall": report.overall,
        "overall_seen": _part_overall(report, "seen"),
        "overall_unseen": _part_overall(report, "unseen"),
        "seen_scores": {}
        if seen is None
        else {c.value: s for c, s in seen.capability_scores.items()},
    }


def _part_overall(report: FeedbackReport, part: Part) -> float:
    scores = report.parts.get(part)
    return 0.0 if scores is None or scores.overall is None else scores.overall


def seeds_table(figures: Mapping[str, Any]) -> str:
    """The figures as text: one line per seed, then the spread and the gate's view."""
    seen, counts = figures["seen"], figures["seen_tasks"]
    rests = figures["seen_concentration"]
    lines = [
        f"One {figures['dataset_size']}-member version ({figures['tasks']} tasks, round seed "
        f"{figures['round_seed']}) trained on the {figures['base']} base under "
        f"{len(figures['runs'])} seeds; {figures['dev_tasks']} development tasks; "
        f"{figures['minutes']} min wall, {figures['cpu_minutes']} min CPU (load average "
        f"{figures['load_average']:.2f} at the end)",
        f"CPU: {figures['cpu']}",
        "",
        "seed | minutes | cpu_minutes | sft_epochs | informative_share | overall_seen | "
        "overall_unseen | seen per capability",
    ]
    for run in figures["runs"]:
        capabilities = ", ".join(f"{c} {v:.3f}" for c, v in sorted(run["seen_scores"].items()))
        lines.append(
            " | ".join(
                cell(run[key])
                for key in (
                    "seed",
                    "minutes",
                    "cpu_minutes",
                    "sft_epochs",
                    "informative_share",
                    "overall_seen",
                    "overall_unseen",
                )
            )
            + f" | {capabilities or '-'}"
        )
    lines += [
        "",
        f"seen Overall: mean {seen['mean']:.3f}, sd {seen['sd']:.3f}, "
        f"range {seen['min']:.3f} to {seen['max']:.3f}",
        f"it rests on {rests['effective_templates']:.1f} effective templates of "
        f"{rests['templates']}; the heaviest, {rests['heaviest']}, weighs "
        f"{rests['heaviest_weight']:.3f} (flywheel tasks development)",
        f"seen tasks ({counts['of']}): solved by every seed {counts['every']}, by some "
        f"{counts['some']}, by none {counts['none']}",
        "seen templates the seeds solved differently (draws: solved per seed):",
    ]
    for row in figures["unsettled_templates"]:
        solved = ", ".join(str(n) for n in row["solved"])
        lines.append(f"  {row['template']} ({row['capability']}) {row['draws']}: {solved}")
    if not figures["unsettled_templates"]:
        lines.append("  none")
    lines.append("the gate on each later seed's model, the first seed's as champion:")
    for run, gate in zip(figures["runs"][1:], figures["gate_against_first"], strict=True):
        gain = "-" if gate["gain"] is None else f"{gate['gain']:+.3f}"
        interval = "-" if gate["low"] is None else f"[{gate['low']:+.3f}, {gate['high']:+.3f}]"
        lines.append(
            f"  seed {run['seed']}: Overall {gain}, interval {interval}, "
            f"{'promote' if gate['promote'] else 'keep'}"
        )
    return "\n".join(lines)
