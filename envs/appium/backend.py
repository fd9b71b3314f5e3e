"""Hybrid execution on a device: the GUI agent on the phone, everything else in the sandbox.

A Sub-agent task that delegates to ``gui`` needs a screen; its other tools (calendar,
messages, memory, skills, search) stay the sandbox's typed tools. ``DeviceBackend``
runs ``gui`` calls on a leased device through a GUI agent (the scripted one unless
another is given) and the rest in a sandbox built from the same seed. Verification
reads the device: the GUI world of the final state (permissions, options, screens)
comes from the device's screen, which is also the evidence ``ui_state`` checks query.
"""

from __future__ import annotations

from collections.abc import Callable

from contract import (
    Action,
    ErrorKind,
    Feedback,
    SubAgentCall,
    TaskSpec,
    ToolSpec,
)
from envs.appium.device import DeviceFaultError, DeviceSession
from envs.appium.gui_agent import GuiAgent, ScriptedGuiAgent
from envs.appium.pool import DeviceLease, DevicePool, DeviceUnavailableError
from envs.backend import Backend, BackendFaultError, PrivilegedEvidence, ScreenRecord
from envs.sandbox import MobileSandbox
from envs.sandbox.subagents import SUBAGENTS
from envs.screen import GUI_COLLECTIONS, Rows, gui_world_from_screen, to_xml

GUI_AGENT = "gui"
_DEVICE_FAULTS = frozenset({ErrorKind.BACKEND_ERROR, ErrorKind.TIMEOUT})


def needs_gui(task: TaskSpec) -> bool:
    """Whether the task's reference plan delegates to the GUI agent."""
    return any(isinstance(a, SubAgentCall) and a.agent == GUI_AGENT for a in task.reference_plan)


class DeviceBackend:
    """The sandbox, with ``gui_agent`` (default: scripted) on the leased device
    (``lease``), or a backend whose every reset fails when no device could be leased
    (``unavailable``)."""

    name = "device"

    def __init__(
        self,
        lease: DeviceLease | None,
        sandbox: MobileSandbox,
        unavailable: str | None = None,
        gui_agent: GuiAgent | None = None,
    ) -> None:
        self._lease = lease
        self._gui_agent: GuiAgent = gui_agent or ScriptedGuiAgent()
        self._sandbox = sandbox
        self._unavailable = unavailable
        self._session: DeviceSession | None = None
        self._record: ScreenRecord | None = None
        self._screen: tuple[dict[str, Rows], str] | None = None
        """The GUI world and document of the screen as last read, until a GUI call."""
        self.device = lease.name if lease is not None else "none"

    def reset(self, task: TaskSpec) -> None:
        self._sandbox.reset(task)
        self._record = None
        self._session = None
        self._screen = None
        if self._lease is None:
            raise BackendFaultError(f"no device: {self._unavailable or 'the pool is empty'}")
        profile = self._lease.spec.profile
        try:
            session = self._lease.session(fresh=profile.fresh_session_per_episode)
            world = {c: self._sandbox.state().get(c, {}) for c in GUI_COLLECTIONS}
            profile.prepare(session.driver, world)
        except Exception as exc:
            self._lease.mark_broken()
            raise BackendFaultError(f"device {self.device}: preparing it failed: {exc}") from None
        self._session = session

    def execute(self, action: Action) -> Feedback:
        if not (isinstance(action, SubAgentCall) and action.agent == GUI_AGENT):
            return self._sandbox.execute(action)
        problem = SUBAGENTS[GUI_AGENT].check(action.arguments, "")
        if problem is not None:
            field, message = problem
            return Feedback.failure(ErrorKind.INVALID_ARGUMENTS, f"{field}: {message}", field)
        assert self._session is not None, "execute before reset"
        self._screen = None  # only the GUI agent changes the screen
        report = self._gui_agent.operate(self._session, action.instruction, dict(action.arguments))
        self._record = ScreenRecord(
            report.observation(self.device),
            tuple(report.artifacts),
            report.input_tokens,
            report.output_tokens,
        )
        error = report.feedback.error
        if error is not None and error.kind in _DEVICE_FAULTS and self._lease is not None:
            self._lease.mark_broken()
        return report.feedback

    def take_screen_record(self) -> ScreenRecord | None:
        record, self._record = self._record, None
        return record

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return self._sandbox.tool_specs()

    def subagent_specs(self) -> tuple[ToolSpec, ...]:
        return self._sandbox.subagent_specs()

    def evidence(self) -> PrivilegedEvidence:
        """The sandbox's state with its GUI world read from the device's screen (read
        once per GUI call: the sandbox's tools do not change the screen)."""
        sandbox = self._sandbox.evidence()
        if self._screen is None:
            if self._session is None:
                raise BackendFaultError(f"device {self.device}: no session to read the screen from")
            try:
                root = self._session.screen_document()
            except DeviceFaultError as fault:
                raise BackendFaultError(f"device {self.device}: {fault}") from None
            self._screen = (gui_world_from_screen(root), to_xml(root))
        world, screen = self._screen
        final = {**sandbox.final, **world}
        return PrivilegedEvidence(initial=sandbox.initial, final=final, screen=screen)


def device_sandbox(device: str) -> MobileSandbox:
    """A new sandbox for the episodes of ``device`` (no simulated faults)."""
    return MobileSandbox(device=device)


class ShardDevices:
    """The devices one shard runs on: one lease at a time, given up when it broke.

    ``backend(attempt)`` is the collector's lease function: a device backend on the
    current lease, or on a new lease (preferring another device) once it broke. A
    pool with nothing healthy in time gives a backend whose reset fails, so the attempt
    is recorded as a backend error rather than lost. Every backend runs ``gui_agent``
    (default: scripted). ``sandbox`` gives the sandbox half of an attempt's episode by a
    name (the device's and the attempt's) that seeds its simulated faults: a retry, on
    another device or the same one, meets other faults, as it would in the sandbox.
    """

    def __init__(
        self,
        pool: DevicePool,
        sandbox: Callable[[str], MobileSandbox] = device_sandbox,
        gui_agent: GuiAgent | None = None,
    ) -> None:
        self._pool = pool
        self._sandbox = sandbox
        self._gui_agent = gui_agent
        self._lease: DeviceLease | None = None
        self.failed: list[str] = []

    def backend(self, attempt: int) -> Backend:
        if self._lease is not None and self._lease.broken:
            self.failed.append(self._lease.name)
            self._pool.release(self._lease)
            self._lease = None
        if self._lease is None:
            try:
                self._lease = self._pool.acquire(avoid=self.failed)
            except DeviceUnavailableError as exc:
                sandbox = self._sandbox(f"none#{attempt}")
                return DeviceBackend(None, sandbox, unavailable=str(exc), gui_agent=self._gui_agent)
        sandbox = self._sandbox(f"{self._lease.name}#{attempt}")
        return DeviceBackend(self._lease, sandbox, gui_agent=self._gui_agent)

    def close(self) -> None:
        if self._lease is not None:
            self._pool.release(self._lease)
            self._lease = None

    def __enter__(self) -> ShardDevices:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
