"""The trainer on several GPUs: one process per GPU under ``accelerate launch``.

    accelerate launch --config_file docs/accelerate/multi-gpu.yaml -m cli.launch \\
        --dataset ds-... [--method sft|rl|sft+rl] [--base tiny|PATH] [--set sft.max_steps=200]

The Prefect flow (``flows/trainer.py``) runs the trainer's steps (``training/trainer.py``)
in one process; this runs them in every process ``accelerate`` starts, and TRL's trainers
train with DDP over those processes. The roles:

- The main process alone opens the catalog (DuckDB lets one process write a file): it
  checks the request and exports the dataset version (``prepare``), builds the tiny base
  (its tokenizer trained on the export) and saves it to
  ``<home>/training/launch/<name>/base``, then broadcasts the plan (the run's name, the
  export and base folders), or its error, which stops every process.
- Every process reads the export from disk (``load_export``, no catalog), loads the same
  base (the same tokenizer and initial weights) and trains: each takes its own share of
  the batches (``sft.batch_size`` and ``rl.tasks_per_update`` are per process) and DDP
  averages the gradients. The RL curve is gathered from every process's rollouts.
- The main process alone evaluates the model on the development set, registers it with
  its curves, and prints the model's id and path as JSON on stdout.

Without ``accelerate`` (``python -m cli.launch ...``) one process does all of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers.utils import logging as hf_logging

from cli.train import resolve_dataset
from contract import FlywheelError, InvalidInputError, ModelRecord, TrainingMethod
from flows.settings import catalog_path, load_settings
from storage import Catalog
from training import trainer as steps
from training.base_model import BaseModel, save_model
from training.base_model import load_base as load_model
from training.replay import RowMix, chosen_rows
from training.rl import GroupRecord, RlResult, UpdateRecord, run_rl, update_record
from training.settings import BUILT_BASES, TrainRequest, parse_assignments
from training.sft import SftResult, run_sft

DDP_TIMEOUT = timedelta(minutes=30)
"""Of the collectives in training: transformers' default ``ddp_timeout`` (the process
group is created here, before the trainers, so it is set here)."""
PREPARE_TIMEOUT = timedelta(hours=6)
"""How long the other processes wait for the main one's export and base."""
_TRUE = {"1", "true", "yes", "y", "on", "t"}


class LaunchError(FlywheelError):
    """The main process could not prepare the run; no process trained."""


@dataclass(frozen=True)
class Plan:
    """What the main process prepared, broadcast to every process."""

    request: TrainRequest
    """The request, its dataset id resolved (``latest``)."""
    name: str
    created_at: datetime
    export: Path
    """The dataset version's export (``hf/`` inside)."""
    base: Path
    """The folder every process loads the base model from."""
    work: Path
    """The run's working folder: the tiny base, the trainers' output folders."""
    chosen: tuple[int, ...] | None = None
    """The SFT rows to train, as ``prepare`` chose them (a continued run's new rows and its
    replay share): positions in the export's rows in content order; None: all of them."""
    mix: RowMix | None = None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="accelerate launch [...] -m cli.launch",
        description="Train on a frozen dataset version in every process accelerate starts "
        "(DDP); the main process evaluates and registers the model.",
    )
    parser.add_argument("--dataset", required=True, help="a dataset version (ds-...) or latest")
    parser.add_argument(
        "--method", choices=[m.value for m in TrainingMethod], help="default: sft+rl"
    )
    parser.add_argument("--base", help="tiny (the default) or a local model folder")
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a request field, e.g. sft.max_steps=200, rl.updates=8, dev_tasks=16 (repeatable)",
    )
    return parser.parse_args(argv)


def request_of(args: argparse.Namespace) -> TrainRequest:
    """The request the arguments make; ``InvalidInputError`` naming a bad field."""
    values: dict[str, Any] = {"dataset_id": args.dataset, **parse_assignments(args.assignments)}
    if args.method is not None:
        values["method"] = args.method
    if args.base is not None:
        values["base"] = args.base
    return TrainRequest.of(values)


def load_export(
    path: Path, chosen: tuple[int, ...] | None = None, mix: RowMix | None = None
) -> steps.TrainingData:
    """The training data of an export folder ``prepare`` wrote, read without the catalog
    (what every process does): its SFT rows at the positions ``chosen`` (all for None) of
    ``prepare``'s content order, and its RL tasks as ``prepare`` keeps them."""
    rows, tasks, weights = steps.read_export(path)
    return steps.TrainingData(path, chosen_rows(rows, chosen), tasks, mix, chosen, weights)


def plan_run(home: Path, request: TrainRequest, processes: int = 1) -> Plan:
    """The main process's part before training: the export, the run's name, and the base
    folder (a built base, ``tiny`` or ``nano``, is built and saved, so that every process
    loads the same one).
    RL needs ``rl.tasks_per_update`` distinct tasks per process and update: with fewer,
    TRL's sampler makes no batch and trains no step, which is refused here."""
    with Catalog.open(catalog_path(home)) as catalog:
        dataset_id = resolve_dataset(catalog.datasets, request.dataset_id)
        request = request.model_copy(update={"dataset_id": dataset_id})
        data = steps.prepare(catalog, home, request)
    if request.uses_rl:
        check_rl_tasks(len(data.rl_tasks), request.rl.tasks_per_update, processes)
    created_at = steps.now()
    name = steps.model_name(request, created_at)
    work = home / "training" / "launch" / name
    base = Path(request.base)
    if request.base in BUILT_BASES:
        base = work / "base"
        save_model(steps.load_base(request, data), base)
    return Plan(request, name, created_at, data.path, base, work, data.chosen, data.mix)


def check_rl_tasks(tasks: int, per_update: int, processes: int) -> None:
    """Refuse ``rl.tasks_per_update`` when one update needs more distinct tasks
    (``tasks_per_update`` x ``processes``) than the export has. None at all is
    ``run_rl``'s refusal, in every process."""
    if tasks == 0 or tasks >= per_update * processes:
        return
    most = tasks // processes
    raise InvalidInputError(
        "rl.tasks_per_update",
        f"{per_update} x {processes} process(es) needs {per_update * processes} distinct RL "
        f"tasks per update and the export has {tasks}: no update would run",
        [f"1 to {most}"] if most else [f"1, with at most {tasks} processes"],
    )


def share_plan(state: PartialState, home: Path | None, request: TrainRequest) -> Plan:
    """The plan: prepared by the main process, broadcast to the others (which wait up to
    ``PREPARE_TIMEOUT``). The main process's failure stops the others (``LaunchError``)."""
    shared: list[Plan | str | None] = [None]
    if state.is_main_process:
        try:
            shared[0] = plan_run(cast(Path, home), request, state.num_processes)
        except BaseException as exc:
            _broadcast(state, [f"{type(exc).__name__}: {exc}"])
            raise
    _broadcast(state, shared)
    plan = shared[0]
    if not isinstance(plan, Plan):
        raise LaunchError(f"the main process could not prepare the run ({plan})")
    return plan


def _broadcast(state: PartialState, objects: list[Any]) -> None:
    """``objects`` from the main process to the others, in place, over a gloo group of
    its own: its timeout is the preparation's, not training's (NCCL's would be 10 min)."""
    if state.num_processes == 1:
        return
    group = torch.distributed.new_group(backend="gloo", timeout=PREPARE_TIMEOUT)
    torch.distributed.broadcast_object_list(objects, src=0, group=group)


def train(plan: Plan, state: PartialState) -> tuple[BaseModel, steps.Curves]:
    """Every process: load the export and the base, run SFT and/or RL (DDP)."""
    request = plan.request
    data = load_export(plan.export, plan.chosen, plan.mix)
    base = dataclasses.replace(load_model(str(plan.base)), name=request.base)
    sft: SftResult | None = None
    rl: RlResult | None = None
    if request.uses_sft:
        with steps.out_of_memory_guard("SFT", "sft.batch_size or sft.max_length"):
            sft = run_sft(base, data.sft, request.sft, plan.work / "sft", on_log=_sft_log(state))
    if request.uses_rl:
        advice = "rl.tasks_per_update, rl.group_size, rl.max_new_tokens or rl.max_steps"
        with steps.out_of_memory_guard("RL", advice):
            rl = run_rl(
                base,
                data.rl_tasks,
                request.rl,
                plan.work / "rl",
                weights=data.rl_weights,
                on_update=_rl_log(state),
            )
        rl = gathered(rl)
    parent = steps.average_with_start(base, request)
    return base, steps.Curves(sft, rl, data.mix, parent)


def gathered(result: RlResult) -> RlResult:
    """``result`` with every process's rollouts. Each process scores only its own groups
    (TRL gathers the rewards for the advantages, not our records); the loss TRL logs is
    already the mean over the processes."""
    groups = cast(list[GroupRecord], gather_object(result.groups))
    counts = cast(list[int], gather_object([result.trajectories]))
    curve = [_merged(u, [g for g in groups if g.update == u.update]) for u in result.curve]
    return dataclasses.replace(result, groups=groups, curve=curve, trajectories=sum(counts))


def _merged(update: UpdateRecord, groups: list[GroupRecord]) -> UpdateRecord:
    record = update_record(
        update.update, update.loss, groups, started=0.0, grad_norm=update.grad_norm
    )
    return dataclasses.replace(record, seconds=update.seconds)


def _sft_log(state: PartialState) -> Callable[[dict[str, Any]], None]:
    def on_log(point: dict[str, Any]) -> None:
        if state.is_main_process:
            _say(f"SFT step {point['step']}/{point['max_steps']}: loss {point['loss']:.4f}")

    return on_log


def _rl_log(state: PartialState) -> Callable[[UpdateRecord], None]:
    def on_update(update: UpdateRecord) -> None:
        if state.is_main_process:
            _say(
                f"RL update {update.update}: {update.movement()}, "
                f"reward {update.mean_reward:.3f} (the main process's rollouts)"
            )

    return on_update


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def finish(home: Path, plan: Plan, base: BaseModel, curves: steps.Curves) -> ModelRecord:
    """The main process, after training: evaluate on the development set, register."""
    request = plan.request
    with Catalog.open(catalog_path(home)) as catalog:
        tasks = steps.development_set(catalog, request)
    note = steps.development_note(tasks, request)
    if note is not None:
        _say(note)
    evaluation = steps.evaluate_model(base, tasks, request, plan.name)
    with Catalog.open(catalog_path(home)) as catalog:
        return steps.register(
            catalog, home, base, request, plan.name, plan.created_at, curves, evaluation.report
        )


def on_cpu() -> bool:
    """No GPU, or ``accelerate launch --cpu``: what ``run_sft`` and ``run_rl`` train on
    (``use_cpu``), where torchrun's processes join over gloo."""
    forced = os.environ.get("ACCELERATE_USE_CPU", "").lower() in _TRUE
    return forced or not torch.cuda.is_available()


def launch(request: TrainRequest) -> dict[str, Any] | None:
    """Run ``request`` in this process: the main process returns what it registered,
    the others None."""
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a bar per process
    state = PartialState(cpu=on_cpu(), timeout=DDP_TIMEOUT)
    try:
        processes = state.num_processes
        home = load_settings().home if state.is_main_process else None
        plan = share_plan(state, home, request)
        if home is not None:
            _say(f"{plan.name}: {processes} process(es); export {plan.export}; base {plan.base}")
        base, curves = train(plan, state)
        state.wait_for_everyone()  # training is over everywhere: no collective follows
    finally:
        state.destroy_process_group()
    if home is None:
        return None
    record = finish(home, plan, base, curves)
    return {
        "model_id": record.id,
        "name": record.name,
        "path": record.path,
        "dataset_id": record.dataset_id,
        "method": record.method.value,
        "feedback_id": record.feedback_id,
        "metrics": record.metrics,
        "processes": processes,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        summary = launch(request_of(args))
    except FlywheelError as exc:
        _say(f"error: {exc}")
        return 1
    if summary is not None:
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
