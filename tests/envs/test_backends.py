"""The backends a task can name: each task runs on, and renders the tools of, its own."""

from __future__ import annotations

import pytest

from contract import InvalidInputError, Split
from envs.backends import Backends, NamedTools, tool_source, tools_of
from envs.bfcl.backend import BfclBackend
from envs.bfcl.construct import bfcl_specs
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from envs.simulated import SimulatedBackend
from envs.simulated_catalog import TOOLS, simulated_tasks


def test_each_task_gets_its_own_backend_kept_for_the_next_task_of_its_kind() -> None:
    sandbox_task = sample_tasks(1, 3, MobileSandbox())[0]
    bfcl_task = next(bfcl_specs(Split.TRAIN))
    backends = Backends()
    on_bfcl = backends.for_task(bfcl_task)
    on_sandbox = backends.for_task(sandbox_task)
    assert isinstance(on_bfcl, BfclBackend) and isinstance(on_sandbox, MobileSandbox)
    assert backends.for_task(bfcl_task) is on_bfcl
    on_bfcl.reset(bfcl_task)
    assert [t.name for t in on_bfcl.tool_specs()] == list(bfcl_task.tools)


def test_tools_come_from_the_task_s_backend() -> None:
    bfcl_task = next(bfcl_specs(Split.TRAIN))
    source = tools_of(bfcl_task)
    assert isinstance(source, NamedTools) and source.subagent_specs() == ()
    backend = BfclBackend()
    backend.reset(bfcl_task)
    assert tuple(source.tool_spec(n) for n in bfcl_task.tools) == backend.tool_specs()
    sandbox_task = sample_tasks(1, 4, MobileSandbox())[0]
    assert tools_of(sandbox_task).subagent_specs()  # the sandbox offers its sub-agents
    with pytest.raises(InvalidInputError, match="BFCL has no function 'send_sms'"):
        source.tool_spec("send_sms")


def test_an_unknown_backend_is_refused_naming_the_known_ones() -> None:
    task = next(bfcl_specs(Split.TRAIN))
    odd = task.model_copy(
        update={
            "initial_conditions": task.initial_conditions.model_copy(update={"backend": "moon"})
        }
    )
    with pytest.raises(InvalidInputError) as raised:
        Backends().for_task(odd)
    assert raised.value.field == "backend" and "bfcl" in (raised.value.allowed or [])
    with pytest.raises(InvalidInputError, match="unknown backend 'moon'"):
        tool_source("moon")


def test_tasks_on_simulated_tools_run_only_with_a_simulator() -> None:
    task = simulated_tasks(1, 0, ())[0]
    assert [tools_of(task).tool_spec(n) for n in task.tools] == [
        t for t in TOOLS if t.name in task.tools
    ]
    with pytest.raises(InvalidInputError, match="needs a simulator"):
        Backends().for_task(task)

    def nobody(system: str, user: str) -> str:
        return "no model here"

    backend = Backends(nobody).for_task(task)
    assert isinstance(backend, SimulatedBackend)
    backend.reset(task)
    assert backend.execute(task.reference_plan[0]).error is not None  # typed, not raised
