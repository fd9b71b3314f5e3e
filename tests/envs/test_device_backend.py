"""Hybrid episodes: the GUI agent on a fake Appium phone (``appium_url``), every other tool in
the sandbox; and the runner's handling of a backend that fails itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from agents.policies.base import Decision, TaskView
from agents.policies.scripted import ScriptedPolicy, ScriptedSession
from agents.runner import run_episode
from contract import (
    Action,
    Capability,
    ErrorKind,
    Feedback,
    Outcome,
    PolicyInfo,
    Step,
    SubAgentCall,
    TaskSpec,
    Termination,
    ToolSpec,
    Trajectory,
    UIStateCheck,
    VerifierSpec,
)
from envs.appium.backend import GUI_AGENT, DeviceBackend, ShardDevices, needs_gui
from envs.appium.device import DeviceSession
from envs.appium.pool import DevicePool, DeviceSpec
from envs.appium.profiles import FakeProfile
from envs.backend import Backend, BackendFaultError, PrivilegedEvidence, RecordsScreens
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, sample_tasks, template_named
from envs.screen import PERMISSIONS, SCREENS, permission_id
from flows.servers import appium_server, free_port
from storage.artifacts import ArtifactStore


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def devices(appium_url: str, store: ArtifactStore) -> DevicePool:
    return DevicePool(
        [DeviceSpec("phone-1", appium_url, FakeProfile())], store=store.put, lease_timeout_s=5
    )


def task(template: str, seed: int = 3, **params: str) -> TaskSpec:
    made = instantiate(template_named(template), seed, MobileSandbox(), params=dict(params))
    assert needs_gui(made)
    return made


def with_checks(spec: TaskSpec, *extra: UIStateCheck) -> TaskSpec:
    """The task with ``extra`` checks (and the id of its new content)."""
    checks = VerifierSpec(checks=(*spec.verifier.checks, *extra))
    return TaskSpec.model_validate(
        spec.model_copy(update={"verifier": checks, "id": ""}).model_dump()
    )


def gui_step(trajectory: Trajectory) -> Step:
    (step,) = [
        s
        for s in trajectory.steps
        if isinstance(s.action, SubAgentCall) and s.action.agent == GUI_AGENT
    ]
    return step


# -- episodes on the phone ----------------------------------------------------------------


def test_a_gui_task_runs_on_the_device_and_keeps_its_evidence(
    devices: DevicePool, store: ArtifactStore
) -> None:
    spec = task("pay_with_bank_code")
    with ShardDevices(devices) as shard:
        backend = shard.backend(0)
        assert isinstance(backend, RecordsScreens)
        trajectory = run_episode(spec, backend, ScriptedPolicy())
    assert trajectory.metadata.outcome is Outcome.SUCCESS, trajectory.verdict
    assert (trajectory.metadata.backend, trajectory.metadata.device) == ("device", "phone-1")
    step = gui_step(trajectory)
    assert step.observation is not None
    assert step.observation.startswith("GUI agent on phone-1: launch_app(app='bank') ✓")
    assert step.observation.split(": ", 1)[1].split(" · ") == [
        "launch_app(app='bank') ✓",
        "read_screen() ✓",
        "screenshot() ✓",
        "home() ✓",
    ]
    assert sorted(Path(ref).suffix for ref in step.artifacts) == [".png", ".xml"]
    for ref in step.artifacts:
        assert ref in store
    others = [s for s in trajectory.steps if s is not step]
    assert others
    assert all(s.observation is None and s.artifacts == () for s in others)
    assert step.feedback.latency_ms > 0


def test_the_screen_is_read_once_per_gui_call_not_per_verification(
    devices: DevicePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox's tools never change the screen: verifying after them reuses the
    screen the last GUI call left; a GUI call makes the next verification read again."""
    reads: list[int] = []
    real = DeviceSession.screen_document

    def counted(self: DeviceSession) -> object:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(DeviceSession, "screen_document", counted)
    spec = task("grant_app_permission", app="gym", permission="camera")
    [delegation] = [a for a in spec.reference_plan if isinstance(a, SubAgentCall)]
    with ShardDevices(devices) as shard:
        backend = shard.backend(0)
        backend.reset(spec)
        first = backend.evidence()
        assert backend.evidence() is not first and len(reads) == 1
        backend.execute(delegation)
        before = len(reads)  # the GUI agent reads the screen itself
        after = backend.evidence()
        backend.evidence()
    assert len(reads) == before + 1
    assert first.final[PERMISSIONS]["gym:camera"]["granted"] is False
    assert after.final[PERMISSIONS]["gym:camera"]["granted"] is True


def test_a_permission_granted_on_the_screen_is_what_the_verifier_reads(
    devices: DevicePool, store: ArtifactStore
) -> None:
    camera = permission_id("gym", "camera")
    spec = with_checks(
        task("grant_app_permission", app="gym", permission="camera"),
        UIStateCheck(xpath=f"//*[@id='{camera}']", attributes={"checked": "true"}),
    )
    sandbox = MobileSandbox()
    with ShardDevices(devices, lambda _: sandbox) as shard:
        backend = shard.backend(0)
        trajectory = run_episode(spec, backend, ScriptedPolicy())
        evidence = backend.evidence()
    assert trajectory.metadata.outcome is Outcome.SUCCESS, trajectory.verdict
    assert trajectory.metadata.termination is Termination.VERIFIED
    kinds = {r.kind: r.met for r in trajectory.verdict.checks}
    assert kinds == {"collaboration": True, "state": True, "ui_state": True, "no_collateral": True}
    # The granted row comes from the phone's screen: the sandbox never ran the GUI agent.
    assert evidence.final[PERMISSIONS]["gym:camera"]["granted"] is True
    assert sandbox.state()[PERMISSIONS]["gym:camera"]["granted"] is False
    assert evidence.screen is not None and f'id="{camera}"' in evidence.screen
    step = gui_step(trajectory)
    assert step.feedback.result == {"app": "gym", "permission": "camera", "granted": True}
    assert step.observation is not None
    assert "tap(id=perm:gym:camera) ✓" in step.observation
    suffixes = sorted(Path(ref).suffix for ref in step.artifacts)
    assert suffixes == [".png", ".xml", ".xml"]  # the screen before and after the tap


def test_the_gui_agent_reads_what_the_backend_typed_in_at_reset(devices: DevicePool) -> None:
    spec = task("gym_number_by_email", seed=8)
    world = MobileSandbox().build_world(spec.initial_conditions.seed)
    content = world[SCREENS]["gym:membership"]["content"]
    with ShardDevices(devices) as shard:
        trajectory = run_episode(spec, shard.backend(0), ScriptedPolicy())
    assert trajectory.metadata.outcome is Outcome.SUCCESS, trajectory.verdict
    assert gui_step(trajectory).feedback.result == {
        "app": "gym",
        "screen": "membership",
        "content": content,
    }


def test_every_gui_template_succeeds_on_the_device(devices: DevicePool) -> None:
    sandbox = MobileSandbox()
    sampled = sample_tasks(40, 17, sandbox, capability=Capability.SUBAGENT)
    assert any(not needs_gui(t) for t in sampled)  # the search agent's tasks stay out
    one_each = {t.template: t for t in sampled if needs_gui(t)}
    assert len(one_each) >= 3
    with ShardDevices(devices) as shard:
        for spec in one_each.values():
            trajectory = run_episode(spec, shard.backend(0), ScriptedPolicy())
            assert trajectory.metadata.outcome is Outcome.SUCCESS, (spec.template, trajectory)
            assert trajectory.metadata.device == "phone-1"
        assert shard.failed == []


def test_invalid_gui_arguments_never_reach_the_device(devices: DevicePool) -> None:
    with ShardDevices(devices) as shard:
        backend = shard.backend(0)
        backend.reset(task("grant_app_permission"))
        feedback = backend.execute(
            SubAgentCall(agent=GUI_AGENT, instruction="x", arguments={"app": "gym"})
        )
        assert feedback.error is not None
        assert feedback.error.kind is ErrorKind.INVALID_ARGUMENTS
        assert isinstance(backend, RecordsScreens)
        assert backend.take_screen_record() is None
        missing = backend.execute(
            SubAgentCall(
                agent=GUI_AGENT,
                instruction="x",
                arguments={"app": "gym", "operation": "grant_permission", "target": "nfc"},
            )
        )
        assert missing.error is not None
        assert (missing.error.kind, missing.error.field) == (ErrorKind.ELEMENT_NOT_FOUND, "target")
        record = backend.take_screen_record()
        assert record is not None and record.observation.endswith("home() ✓")
        assert backend.take_screen_record() is None  # taken once


# -- a backend that fails itself ----------------------------------------------------------


class FailingBackend:
    """A sandbox whose device fails at ``reset`` or when its evidence is read."""

    name = "fake-device"
    device = "fake-1"

    def __init__(self, *, at_reset: bool) -> None:
        self.sandbox = MobileSandbox()
        self.at_reset = at_reset

    def reset(self, task: TaskSpec) -> None:
        if self.at_reset:
            raise BackendFaultError("device fake-1: the phone went away")
        self.sandbox.reset(task)

    def execute(self, action: Action) -> Feedback:
        return self.sandbox.execute(action)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return self.sandbox.tool_specs()

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        return self.sandbox.subagent_specs()

    def evidence(self) -> PrivilegedEvidence:
        raise BackendFaultError("device fake-1: reading the screen failed")


def test_a_backend_fault_at_reset_is_a_backend_error_trajectory() -> None:
    backend: Backend = FailingBackend(at_reset=True)
    trajectory = run_episode(task("grant_app_permission"), backend, ScriptedPolicy(), attempt=2)
    metadata = trajectory.metadata
    assert (metadata.outcome, metadata.termination) == (
        Outcome.BACKEND_ERROR,
        Termination.BACKEND_ERROR,
    )
    assert (metadata.backend, metadata.device, metadata.attempt) == ("fake-device", "fake-1", 2)
    (step,) = trajectory.steps
    assert step.action is None
    assert step.feedback.error is not None
    assert step.feedback.error.kind is ErrorKind.BACKEND_ERROR
    assert step.feedback.error.message == "device fake-1: the phone went away"
    assert (trajectory.verdict.passed, trajectory.verdict.score) == (False, 0.0)
    assert trajectory.cost.tool_calls == 0


def test_a_backend_fault_after_steps_keeps_them_and_adds_the_fault() -> None:
    spec = task("pay_with_bank_code")
    trajectory = run_episode(spec, FailingBackend(at_reset=False), ScriptedPolicy())
    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    *played, last = trajectory.steps
    assert [s.action for s in played] == list(spec.reference_plan)[: len(played)]
    assert played and all(s.feedback.error is None for s in played)
    assert last.action is None and last.index == len(played)
    assert last.feedback.error is not None
    assert last.feedback.error.message == "device fake-1: reading the screen failed"


def test_with_no_device_the_attempt_is_a_backend_error() -> None:
    devices = DevicePool(
        [DeviceSpec("phone-1", "http://phone-1", FakeProfile())],
        healthy=lambda url: False,
        lease_timeout_s=0.2,
        poll_s=0.05,
    )
    with ShardDevices(devices) as shard:
        backend = shard.backend(0)
        assert isinstance(backend, DeviceBackend)
        trajectory = run_episode(task("grant_app_permission"), backend, ScriptedPolicy())
    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    assert trajectory.metadata.device == "none"
    (step,) = trajectory.steps
    assert step.action is None and step.feedback.error is not None
    assert "no device free and healthy" in step.feedback.error.message


class StopServerFirst:
    """The scripted policy, after stopping a server just before its first action."""

    def __init__(self, stop: Callable[[], object]) -> None:
        self._stop = stop
        self._scripted = ScriptedPolicy()
        self._session: ScriptedSession | None = None

    @property
    def info(self) -> PolicyInfo:
        return self._scripted.info

    def start(self, task: TaskSpec, view: TaskView) -> StopServerFirst:
        self._session = self._scripted.start(task, view)
        return self

    def act(self, history: Sequence[Step]) -> Decision:
        assert self._session is not None
        if not history:
            self._stop()
        return self._session.act(history)


@pytest.mark.slow
def test_a_device_lost_mid_episode_is_retried_on_the_other_device(
    appium_url: str, tmp_path: Path
) -> None:
    port = free_port()
    server = appium_server(tmp_path / "home", port)
    server.start()
    try:
        devices = DevicePool(
            [
                DeviceSpec("phone-1", f"http://127.0.0.1:{port}", FakeProfile()),
                DeviceSpec("phone-2", appium_url, FakeProfile()),
            ],
            lease_timeout_s=5,
            command_timeout_s=5,
        )
        spec = task("grant_app_permission", app="bank", permission="location")
        with ShardDevices(devices) as shard:
            lost = run_episode(spec, shard.backend(0), StopServerFirst(server.stop))
            retried = run_episode(spec, shard.backend(1), ScriptedPolicy(), attempt=1)
            assert shard.failed == ["phone-1"]
    finally:
        server.stop()
    assert lost.metadata.outcome is Outcome.BACKEND_ERROR
    assert lost.metadata.device == "phone-1"
    [only] = lost.steps  # the failed step says what failed: no second step for the fault
    assert only.feedback.error is not None
    assert only.feedback.error.kind is ErrorKind.BACKEND_ERROR
    assert only.observation == ("GUI agent on phone-1: launch_app(app='bank') ✗ backend_error")
    assert retried.metadata.outcome is Outcome.SUCCESS
    assert (retried.metadata.device, retried.metadata.attempt) == ("phone-2", 1)
