"""``flywheel``: the command line of the data flywheel.

Every command that prints data has ``--json``; the same arguments print the same bytes.
Bad input exits non-zero with a message naming the field and the allowed values.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer
from pydantic import ValidationError

import cli.export  # noqa: F401  (registers ``datasets export`` on datasets_app)
from cli.deploy import (
    deploy_app,
    register_in_pool,
    run_loop_command,
    run_worker,
    serve_deployments,
)
from cli.devices import devices_app
from cli.feedback import feedback_app
from cli.gate import gate_app
from cli.identifiers import checked
from cli.output import BUILT_BASES, COLLECTORS, choices, emit_json, error_json
from cli.plan import plan_app
from cli.rounds import (
    ROUND_BACKENDS,
    datasets_app,
    round_bfcl_share,
    rounds_app,
    run_round_command,
)
from cli.servers import server_app
from cli.train import models_app, run_train_command, serve_trainer
from cli.verify import verify_command
from contract import (
    DATASET_ID,
    LOOP_DEV_TASKS,
    ROUND_ID,
    Capability,
    Difficulty,
    FlywheelError,
    InvalidInputError,
    Split,
    TrainingMethod,
)
from envs.bfcl.tasks import CATEGORIES, SUITE
from envs.bfcl.tasks import SPLITS as BFCL_SPLITS
from flows.settings import APPROVAL_MODES, DEVICE_ROUTES, GateName, PolicyName

if TYPE_CHECKING:
    from bench.report import BenchReport

app = typer.Typer(
    rich_markup_mode="markdown",
    help="The open data flywheel for mobile planning agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
contract_app = typer.Typer(
    rich_markup_mode="markdown",
    help="The action-feedback-verification contract.",
    no_args_is_help=True,
)
tasks_app = typer.Typer(
    rich_markup_mode="markdown", help="Task templates and sampled tasks.", no_args_is_help=True
)
bench_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Benchmarks: figures and ratios, never pass/fail.",
    no_args_is_help=True,
)
app.add_typer(contract_app, name="contract")
app.add_typer(tasks_app, name="tasks")
app.add_typer(bench_app, name="bench")
app.add_typer(rounds_app, name="rounds")
app.add_typer(datasets_app, name="datasets")
app.add_typer(server_app, name="server")
app.add_typer(gate_app, name="gate")
app.add_typer(feedback_app, name="feedback")
app.add_typer(plan_app, name="plan")
app.add_typer(models_app, name="models")
app.add_typer(deploy_app, name="deploy")
app.add_typer(devices_app, name="devices")
app.command("verify")(verify_command)

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]
CapabilityOpt = Annotated[Capability | None, typer.Option(help="only this capability")]
DifficultyOpt = Annotated[Difficulty | None, typer.Option(help="only this difficulty")]
SplitOpt = Annotated[Split | None, typer.Option(help="train or dev (held out)")]
CountOpt = Annotated[int, typer.Option("--n", min=0, help="how many")]
SeedOpt = Annotated[int, typer.Option(min=0, help="random seed")]
BenchBaseOpt = Annotated[
    str, typer.Option(metavar=choices(BUILT_BASES), help="the base the benchmark trains")
]
TrainerSetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="a trainer parameter, e.g. sft.epochs=2 (repeatable)"),
]
POLICY_HELP = "who collects: champion is the model server's"
POLICY_CHOICES = choices(get_args(PolicyName))


@contract_app.command("schema")
def contract_schema() -> None:
    """Print the JSON Schema of every contract record."""
    from cli.output import emit_json
    from contract.schema import contract_schemas

    emit_json(contract_schemas())


@tasks_app.command("templates")
def tasks_templates(as_json: JsonFlag = False) -> None:
    """List the task templates."""
    from cli.output import emit_json, table
    from envs.sandbox.templates.registry import ALL_TEMPLATES

    items = [
        {
            "name": t.name,
            "capabilities": [c.value for c in t.capabilities],
            "difficulty": t.difficulty.value,
            "domains": list(t.domains),
            "split": t.split.value,
        }
        for t in ALL_TEMPLATES
    ]
    if as_json:
        emit_json(items)
        return
    rows = [
        (
            i["name"],
            ",".join(i["capabilities"]),
            i["difficulty"],
            ",".join(i["domains"]),
            i["split"],
        )
        for i in items
    ]
    typer.echo(table(("template", "capabilities", "difficulty", "domains", "split"), rows))


@tasks_app.command("strength")
def tasks_strength(
    seeds: Annotated[int, typer.Option(min=1, max=1000, help="seeded worlds per template")] = 8,
    template: Annotated[str | None, typer.Option(help="one template (default: all)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """The verifier-strength suite: every mutant of each template's reference plan (another
    task's plan, nothing, finishing at once, a destructive extra call, a dropped or swapped
    step) against its verifier. Exits 1 when a template is weak."""
    from cli.output import emit_json
    from envs.sandbox import MobileSandbox
    from envs.sandbox.templates.catalog import template_named
    from envs.sandbox.templates.registry import ALL_TEMPLATES
    from envs.sandbox.templates.strength import measure_all, strength_table

    chosen = [template_named(template)] if template is not None else list(ALL_TEMPLATES)
    results = measure_all(chosen, range(seeds), MobileSandbox())
    rows = [r.to_json() for r in results]
    if as_json:
        emit_json(rows)
    else:
        typer.echo(strength_table(rows))
        for r in results:
            for line in (r.reference_failures + r.survivors)[:5]:
                typer.echo(f"  {r.template}: {line}")
    if any(r.weak for r in results):
        raise typer.Exit(1)


@tasks_app.command("sample")
def tasks_sample(
    n: CountOpt = 10,
    seed: SeedOpt = 0,
    capability: CapabilityOpt = None,
    difficulty: DifficultyOpt = None,
    split: SplitOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Sample task specs (with their verifiers) from the templates."""
    from cli.output import emit_json, table
    from envs.sandbox import MobileSandbox
    from envs.sandbox.templates.catalog import sample_tasks

    tasks = sample_tasks(
        n, seed, MobileSandbox(), capability=capability, difficulty=difficulty, split=split
    )
    if as_json:
        emit_json([t.model_dump(mode="json") for t in tasks])
        return
    rows = [(t.id, t.template, t.difficulty.value, t.split.value, t.goal) for t in tasks]
    typer.echo(table(("id", "template", "difficulty", "split", "goal"), rows))


@tasks_app.command("development")
def tasks_development(
    size: Annotated[
        int | None, typer.Option(min=1, max=10_000, help="draw this many instead")
    ] = None,
    seed: Annotated[int | None, typer.Option(min=0, help="draw with this seed instead")] = None,
    as_json: JsonFlag = False,
) -> None:
    """How many templates the development set's scores rest on: per part, for the
    Overall and each capability, the tasks, templates, effective number of templates and
    the heaviest template's weight. The catalog's stored set, or (with --size or --seed, or
    when none is stored) the set the trainer would draw, not stored."""
    from cli.output import emit_json, table
    from envs.sandbox import MobileSandbox
    from envs.sandbox.templates.development import draw_development_set
    from flows.settings import load_settings
    from storage import Catalog
    from training.development_weights import development_concentration
    from training.evaluate import development_tasks
    from training.settings import TrainRequest

    settings = load_settings()
    tasks = None
    if size is None and seed is None and settings.catalog_path.exists():
        with Catalog.open(settings.catalog_path, read_only=True) as catalog:
            if catalog.tasks.fingerprints(Split.DEV):
                tasks = development_tasks(catalog)
    source = f"stored in {settings.catalog_path}"
    if tasks is None:
        defaults = TrainRequest.model_fields
        size = size or int(defaults["dev_tasks"].default)
        seed = int(defaults["dev_seed"].default) if seed is None else seed
        tasks = list(draw_development_set(size, seed, MobileSandbox()).tasks)
        source = f"drawn: {size} tasks, seed {seed}, an even mix (not stored)"
    parts = development_concentration(tasks)
    if as_json:
        emit_json(
            {
                "source": source,
                "parts": {
                    p: {k: c.to_json() for k, c in rows.items()} for p, rows in parts.items()
                },
            }
        )
        return
    headers = ("part", "score", "tasks", "templates", "effective", "heaviest", "weight")
    rows = [
        (part, score, c.tasks, c.templates, c.effective_templates, c.heaviest, c.heaviest_weight)
        for part, scores in parts.items()
        for score, c in scores.items()
    ]
    typer.echo(f"development set {source}\n{table(headers, rows)}")
    typer.echo(
        "effective: 1 / the sum of the templates' squared weights, the number of equally "
        "weighted templates the score is like; weight: how far the heaviest template alone "
        "moves the score"
    )


@tasks_app.command("validate")
def tasks_validate(
    path: Annotated[Path, typer.Argument(help="JSON file: one task spec or a list of them")],
    as_json: JsonFlag = False,
) -> None:
    """Check task specs from a file: schema, tools, state collections, reference plan."""
    from cli.output import emit_json, table
    from contract import TaskSpec
    from envs.sandbox import MobileSandbox
    from envs.sandbox.templates.catalog import replay_reference

    data = _read_json(path)
    specs = data if isinstance(data, list) else [data]
    sandbox = MobileSandbox()
    results = []
    for i, raw in enumerate(specs):
        try:
            task = TaskSpec.model_validate(raw)
        except ValidationError as exc:
            raise FlywheelError(f"{path} item {i}: {_first_error(exc)}") from None
        verdict = replay_reference(task, sandbox)
        results.append({"id": task.id, "reference_passes": verdict.passed})
    if as_json:
        emit_json(results)
    else:
        typer.echo(table(("task", "reference passes"), [tuple(r.values()) for r in results]))
    if not all(r["reference_passes"] for r in results):
        raise typer.Exit(1)


@app.command("episode")
def episode(
    n: CountOpt = 5,
    seed: SeedOpt = 0,
    policy: Annotated[str, typer.Option(metavar=POLICY_CHOICES, help=POLICY_HELP)] = "scripted",
    fault_rate: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="scripted: share of faulty episodes")
    ] = None,
    capability: CapabilityOpt = None,
    difficulty: DifficultyOpt = None,
    split: SplitOpt = None,
    max_steps: Annotated[int | None, typer.Option(min=1, help="step budget")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sample tasks and run one episode each; print the trajectories."""
    from cli.episodes import run_episodes
    from cli.output import capability_summary, emit_json

    trajectories = run_episodes(
        n=n,
        seed=seed,
        policy_name=policy,
        fault_rate=fault_rate,
        capability=capability,
        difficulty=difficulty,
        split=split,
        max_steps=max_steps,
    )
    if as_json:
        emit_json([t.model_dump(mode="json") for t in trajectories])
        return
    typer.echo(capability_summary(trajectories))


@app.command("round")
def round_(
    tasks: Annotated[int | None, typer.Option(min=1, help="tasks to construct")] = None,
    seed: Annotated[int | None, typer.Option(min=0, help="seed of task construction")] = None,
    policy: Annotated[str | None, typer.Option(metavar=POLICY_CHOICES, help=POLICY_HELP)] = None,
    fault_rate: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="scripted: share of faulty episodes")
    ] = None,
    backend_fault_rate: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="share of tool calls the backend fails")
    ] = None,
    gate: Annotated[
        str | None, typer.Option(metavar=choices(get_args(GateName)), help="the human gate")
    ] = None,
    approval: Annotated[
        str | None,
        typer.Option(
            metavar=choices(APPROVAL_MODES),
            help="dataset approval: person pauses for the Prefect UI",
        ),
    ] = None,
    round_id: Annotated[
        str | None,
        typer.Option(
            help="resume this round (default: derived from the config)",
            callback=checked(ROUND_ID),
        ),
    ] = None,
    devices: Annotated[
        str | None,
        typer.Option(
            metavar=choices(DEVICE_ROUTES),
            help="gui: tasks that need the GUI agent run on the device pool",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            metavar=choices(ROUND_BACKENDS),
            help="where the tasks come from: the sandbox, or BFCL's multi-turn tasks",
        ),
    ] = None,
    bfcl_share: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="a mixed round: share of the tasks taken from BFCL"),
    ] = None,
    simulated_share: Annotated[
        float | None,
        typer.Option(
            min=0.0, max=1.0, help="share of the tasks on long-tail tools an agent LLM simulates"
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a flywheel round as a Prefect flow: construct, collect, curate, gate, propose,
    approve, freeze. Rerunning the same round resumes it."""
    run_round_command(
        devices=devices,
        bfcl_share=round_bfcl_share(backend, bfcl_share),
        simulated_share=simulated_share,
        tasks=tasks,
        seed=seed,
        policy=policy,
        fault_rate=fault_rate,
        backend_fault_rate=backend_fault_rate,
        gate=gate,
        approval=approval,
        round_id=round_id,
        as_json=as_json,
    )


@app.command("train")
def train(
    dataset: Annotated[
        str | None,
        typer.Option(
            help="frozen dataset version (ds-...), or 'latest'",
            callback=checked(DATASET_ID, "latest"),
        ),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(metavar=choices(m.value for m in TrainingMethod), help="default: sft+rl"),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            help="tiny (default), nano (both built here; nano is the CPU base that learns) "
            "or a local model folder"
        ),
    ] = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="a trainer parameter, e.g. sft.max_steps=60, rl.updates=8, dev_tasks=24 "
            "(repeatable)",
        ),
    ] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="instead: serve the trainer as a deployment, to start runs from the Prefect UI",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Train on a frozen dataset version as the Prefect flow ``trainer``: SFT and/or
    online RL with CARE, evaluation on the development set, a registered model and a
    feedback report the next round plans from. ``--serve`` serves it for the Prefect UI."""
    if serve:
        serve_trainer()
        return
    if dataset is None:
        raise InvalidInputError("--dataset", "is required", ["ds-...", "latest"])
    run_train_command(
        dataset=dataset,
        method=method,
        base=base,
        assignments=assignments or [],
        as_json=as_json,
    )


@app.command("eval")
def eval_suite(
    suite: Annotated[str, typer.Option(metavar=choices([SUITE]), help="the suite")] = SUITE,
    policy: Annotated[
        str,
        typer.Option(metavar=POLICY_CHOICES, help="who answers: champion is the model server's"),
    ] = "champion",
    category: Annotated[
        list[str] | None,
        typer.Option(metavar=choices(CATEGORIES), help="repeatable; default: all four"),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="tasks per category")] = None,
    split: Annotated[
        str,
        typer.Option(
            metavar=choices(BFCL_SPLITS),
            help="dev: the tasks rounds hold out; all: every task, as the leaderboard runs",
        ),
    ] = "dev",
    as_json: JsonFlag = False,
) -> None:
    """A policy on BFCL's multi-turn tasks: accuracy per category by our verifier and by
    BFCL's own checker on the same episodes."""
    from cli.output import table
    from flows.policies import build_policy
    from flows.settings import load_settings
    from training.bfcl_suite import run_suite

    if suite != SUITE:
        raise InvalidInputError("--suite", f"unknown suite {suite!r}", [SUITE])
    chosen = build_policy(policy, load_settings(), fault_rate=0.0)
    scores = run_suite(chosen, category or CATEGORIES, limit, split=split)
    if as_json:
        emit_json(
            {
                "suite": suite,
                "policy": policy,
                "split": split,
                "categories": [s.as_dict() for s in scores],
            }
        )
        return
    rows = [
        (s.category, s.tasks, f"{s.accuracy:.3f}", f"{s.bfcl_accuracy:.3f}", len(s.disagreements))
        for s in scores
    ]
    header = ("category", "tasks", "accuracy", "BFCL's checker", "disagreements")
    typer.echo(table(header, rows))


@app.command("loop")
def loop(
    rounds: Annotated[int, typer.Option(min=1, max=100, help="turns of round, train, deploy")] = 2,
    tasks: Annotated[
        int | None, typer.Option(min=1, help="tasks per round [default: settings]")
    ] = None,
    collect_with: Annotated[
        str,
        typer.Option(
            metavar=choices(COLLECTORS),
            help="champion: the served model, once there is one; settings: the round's policy",
        ),
    ] = "champion",
    teacher_share: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="share of a champion round's tasks the scripted teacher collects"
        ),
    ] = 0.5,
    champion_tasks: Annotated[
        int | None,
        typer.Option(min=0, help="at most this many of a round's tasks collected by the champion"),
    ] = None,
    correct_failures: Annotated[
        bool | None,
        typer.Option(
            "--correct-failures/--no-correct-failures",
            help="the scripted teacher collects again each task the champion failed "
            "[default: settings]",
        ),
    ] = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="a trainer parameter for every turn, e.g. sft.max_steps=60 (repeatable)",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The closed loop as the Prefect flow ``loop``: each turn runs a round (collected by
    the served champion), trains on its dataset and deploys the result; plots per turn."""
    run_loop_command(
        rounds=rounds,
        tasks=tasks,
        collect_with=collect_with,
        teacher_share=teacher_share,
        champion_tasks=champion_tasks,
        correct_failures=correct_failures,
        assignments=assignments or [],
        as_json=as_json,
    )


PoolOption = Annotated[
    str | None,
    typer.Option(
        "--pool",
        help="a process work pool [default: settings, FLYWHEEL_EXECUTION__WORK_POOL=flywheel]",
    ),
]


@app.command("serve")
def serve(
    pool: PoolOption = None,
    to_pool: Annotated[
        bool,
        typer.Option(
            "--to-pool",
            help="register the deployments in the work pool and return: workers "
            "(flywheel worker) run them, here or on other machines",
        ),
    ] = False,
) -> None:
    """Register and serve the Prefect deployments: the scheduled round (cron from
    settings), trainer, deployment, rollback and loop, each with a form in the UI."""
    if to_pool or pool is not None:
        register_in_pool(pool)
    else:
        serve_deployments()


@app.command("worker")
def worker(
    pool: PoolOption = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="flow runs at once [default: no limit]"),
    ] = None,
) -> None:
    """Run the flow runs of a work pool on this machine, each in a subprocess, until
    interrupted (register the deployments there first: flywheel serve --to-pool)."""
    run_worker(pool, limit)


@bench_app.command("sandbox")
def bench_sandbox(
    episodes: Annotated[int, typer.Option(min=10, help="episodes to run")] = 2000,
    seed: SeedOpt = 0,
    as_json: JsonFlag = False,
) -> None:
    """Episodes/s, tool calls/s, and one tool call's cost against a bare function."""
    from bench.sandbox import run_benchmark

    _bench_out(run_benchmark(episodes=episodes, seed=seed), as_json)


@bench_app.command("loop")
def bench_loop(
    rounds: Annotated[int, typer.Option(min=1, max=20, help="turns of the loop")] = 3,
    tasks: Annotated[int, typer.Option(min=10, help="tasks per round")] = 2000,
    champion_tasks: Annotated[
        int, typer.Option(min=0, help="at most this many of a round's tasks by the champion")
    ] = 200,
    dev_tasks: Annotated[
        int,
        typer.Option(
            min=1, help="development tasks: the gate resolves a turn's gain on the seen part"
        ),
    ] = LOOP_DEV_TASKS,
    base: BenchBaseOpt = "nano",
    assignments: TrainerSetOpt = None,
    seed: Annotated[
        int, typer.Option(min=0, help="seed of the first round (each turn adds one) and training")
    ] = 0,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="keep the loop's state folder here, to look into its catalog and models "
            "afterwards (empty or new; default: a temporary folder)"
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The loop itself: per turn, minutes, dataset size, SFT rows and epochs, informative
    RL groups, and the champion's development Overall on seen and unseen templates."""
    from bench.loop import loop_table, run_loop_benchmark
    from bench.report import figures_json

    values = _trainer_assignments(base, assignments, ("sft", "rl", "parent_share"))
    figures = run_loop_benchmark(
        rounds,
        tasks,
        champion_tasks=champion_tasks,
        dev_tasks=dev_tasks,
        base=base,
        sft=values.get("sft"),
        rl=values.get("rl"),
        parent_share=values.get("parent_share"),
        seed=seed,
        workdir=workdir,
    )
    typer.echo(figures_json(figures) if as_json else loop_table(figures))


@bench_app.command("seeds")
def bench_seeds(
    seeds: Annotated[int, typer.Option(min=2, max=20, help="training seeds: 0 to N-1")] = 3,
    tasks: Annotated[int, typer.Option(min=10, help="tasks in the round")] = 2000,
    dev_tasks: Annotated[int, typer.Option(min=1, help="development tasks")] = 240,
    base: BenchBaseOpt = "nano",
    assignments: TrainerSetOpt = None,
    round_seed: Annotated[int, typer.Option(min=0, help="the round's seed")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """One round's version trained under several seeds: how far apart one recipe's models
    land (seen Overall's spread, tasks every seed solves, the gate on a retrain)."""
    from bench.report import figures_json
    from bench.seeds import run_seeds_benchmark, seeds_table

    values = _trainer_assignments(base, assignments)
    figures = run_seeds_benchmark(
        seeds,
        tasks,
        dev_tasks=dev_tasks,
        base=base,
        sft=values.get("sft"),
        rl=values.get("rl"),
        round_seed=round_seed,
    )
    typer.echo(figures_json(figures) if as_json else seeds_table(figures))


def _trainer_assignments(
    base: str, assignments: list[str] | None, settable: tuple[str, ...] = ("sft", "rl")
) -> dict[str, Any]:
    """A benchmark's ``--base`` checked and its ``--set`` parsed: ``sft.*``, ``rl.*`` and
    whatever else of the trainer's ``settable`` names (checked as a request would be)."""
    from training.settings import TrainRequest, parse_assignments

    if base not in BUILT_BASES:
        raise InvalidInputError("base", f"unknown value {base!r}", BUILT_BASES)
    values = parse_assignments(assignments or [])
    unknown = sorted(set(values) - set(settable))
    if unknown:
        allowed = ", ".join(f"{name}.*" if name in ("sft", "rl") else name for name in settable)
        raise InvalidInputError("--set", f"{unknown[0]}: the benchmark sets {allowed}")
    TrainRequest.of({"dataset_id": "latest", "base": base, **values})  # refused by name
    return values


@bench_app.command("round")
def bench_round(
    tasks: Annotated[int, typer.Option(min=12, help="tasks in the round")] = 2000,
    seed: SeedOpt = 0,
    repeat: Annotated[int, typer.Option(min=1, max=10, help="interleaved pairs")] = 3,
    as_json: JsonFlag = False,
) -> None:
    """A round through Prefect and LangGraph against the same work in plain Python,
    interleaved, in wall and CPU time."""
    from bench.round import run_round_benchmark

    _bench_out(run_round_benchmark(tasks=tasks, seed=seed, repeat=repeat), as_json)


@bench_app.command("ingest")
def bench_ingest(
    trajectories: Annotated[int, typer.Option(min=10, help="trajectories to ingest")] = 3000,
    seed: SeedOpt = 0,
    as_json: JsonFlag = False,
) -> None:
    """Steps per second from Parquet shards into the DuckDB catalog."""
    from bench.ingest import run_ingest_benchmark

    _bench_out(run_ingest_benchmark(trajectories=trajectories, seed=seed), as_json)


@bench_app.command("curation")
def bench_curation(
    trajectories: Annotated[
        int, typer.Option(min=100, help="trajectories in the synthetic round")
    ] = 200_000,
    seed: SeedOpt = 0,
    as_json: JsonFlag = False,
) -> None:
    """Curation, balancing, freezing and export of a large round: wall time, peak memory."""
    from bench.curation import run_curation_benchmark

    _bench_out(run_curation_benchmark(trajectories=trajectories, seed=seed), as_json)


@bench_app.command("dedup")
def bench_dedup(
    items: Annotated[int, typer.Option(min=100, help="documents to deduplicate")] = 200_000,
    seed: SeedOpt = 0,
    as_json: JsonFlag = False,
) -> None:
    """Near-duplicate detection: ours against datasketch's MinHashLSH, with recall/precision."""
    from bench.dedup import run_dedup_benchmark

    _bench_out(run_dedup_benchmark(items=items, seed=seed), as_json)


@bench_app.command("training")
def bench_training(
    sft_steps: Annotated[int, typer.Option(min=1, help="SFT optimizer steps")] = 20,
    batch_size: Annotated[int, typer.Option(min=1, help="SFT rows per step")] = 4,
    rl_updates: Annotated[int, typer.Option(min=1, help="RL updates")] = 2,
    group_size: Annotated[int, typer.Option(min=2, help="RL rollouts per task")] = 4,
    tasks_per_update: Annotated[int, typer.Option(min=1, help="RL tasks per update")] = 1,
    max_steps: Annotated[int, typer.Option(min=1, help="actions per rollout")] = 3,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="tokens per reply")] = 48,
    tasks: Annotated[int, typer.Option(min=1, help="scripted episodes in the dataset")] = 24,
    threads: Annotated[
        int | None, typer.Option(min=1, help="torch threads (default: the cores)")
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="keep the work here (default: a temporary folder)")
    ] = None,
    seed: SeedOpt = 0,
    as_json: JsonFlag = False,
) -> None:
    """SFT tokens/s, generation tokens/s and RL rollouts/s on the tiny model (and a larger
    one with a GPU)."""
    from bench.training import report, run_training_benchmark
    from cli.output import emit_json

    result = run_training_benchmark(
        sft_steps=sft_steps,
        batch_size=batch_size,
        rl_updates=rl_updates,
        group_size=group_size,
        tasks=tasks,
        tasks_per_update=tasks_per_update,
        max_steps=max_steps,
        max_new_tokens=max_new_tokens,
        seed=seed,
        threads=threads,
        workdir=workdir,
    )
    if as_json:
        emit_json(result.to_json())
    else:
        typer.echo(report(result))


@bench_app.command("serving")
def bench_serving(
    requests: Annotated[int, typer.Option(min=1, help="sequential chat completions")] = 20,
    episodes: Annotated[int, typer.Option(min=1, help="sandbox episodes via the server")] = 4,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="tokens per reply")] = 32,
    threads: Annotated[
        int | None, typer.Option(min=1, help="torch threads (default: the cores)")
    ] = None,
    seed: SeedOpt = 0,
    as_json: JsonFlag = False,
) -> None:
    """The model server on the tiny model: start-up, requests/s and latency, tokens/s
    against the same generation in-process, episodes/s, and seconds per model swap."""
    from bench.serving import run_serving_benchmark

    measured = run_serving_benchmark(
        requests=requests,
        episodes=episodes,
        max_new_tokens=max_new_tokens,
        threads=threads,
        seed=seed,
    )
    _bench_out(measured, as_json)


@bench_app.command("devices")
def bench_devices(
    episodes: Annotated[int, typer.Option(min=2, help="GUI episodes")] = 12,
    calls: Annotated[int, typer.Option(min=1, help="calls per GUI tool")] = 20,
    seed: SeedOpt = 0,
    as_json: JsonFlag = False,
) -> None:
    """Appium's fake driver: session and GUI tool latencies, device episodes/s against
    the sandbox, and a two-device pool against one."""
    from bench.devices import run_devices_benchmark

    _bench_out(run_devices_benchmark(episodes=episodes, calls=calls, seed=seed), as_json)


def _bench_out(report: BenchReport, as_json: bool) -> None:
    """A benchmark's figures as JSON, or its text."""
    if as_json:
        emit_json(report.figures)
    else:
        typer.echo(report.text)


def _read_json(path: Path) -> Any:
    import orjson

    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise FlywheelError(f"{path}: no such file") from None
    except orjson.JSONDecodeError as exc:
        raise FlywheelError(f"{path}: not valid JSON ({exc})") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "record"
    return f"{where}: {err['msg']} ({exc.error_count()} problem(s) in all)"


def main() -> None:
    """The ``flywheel`` command. A refusal exits 1 with ``error: ...`` on stderr; with
    ``--json``, as ``{"error": {"field", "problem", "allowed"}}`` on stdout (usage errors
    too, with their exit code 2)."""
    as_json = "--json" in sys.argv[1:]
    try:
        if not as_json:
            app()
            return
        app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except typer.TyperException as exc:  # click's usage errors: a bad option, a bad value
        param = getattr(exc, "param", None)
        field = param.opts[0] if param is not None and param.opts else None
        emit_json(error_json(field, exc.format_message(), None))
        sys.exit(exc.exit_code)
    except InvalidInputError as exc:
        _refuse(as_json, exc, error_json(exc.field, exc.problem, exc.allowed))
    except FlywheelError as exc:
        _refuse(as_json, exc, error_json(None, str(exc), None))
    except ValidationError as exc:
        _refuse(as_json, _first_error(exc), error_json(None, _first_error(exc), None))


def _refuse(as_json: bool, shown: object, payload: dict[str, Any]) -> None:
    if as_json:
        emit_json(payload)
    else:
        typer.echo(f"error: {shown}", err=True)
    sys.exit(1)
