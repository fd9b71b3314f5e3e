"""Device throughput on Appium's fake driver: what the GUI agent's tools and a device
episode cost, against the same episodes in the sandbox, and how a pool scales.

**Set-up**: a private Appium server on a free 127.0.0.1 port (start-up seconds are
reported), the repo's fake phone, and ``episodes`` Sub-agent tasks that delegate to the
GUI agent (drawn with ``seed``).

**Work**:

1. tools: ``calls`` times each of session creation, ``read_screen`` (page source plus
   the live state of every toggle and field: one request per element on the fake
   driver), ``screenshot`` (stored in an artifact store) and ``tap``: mean milliseconds;
2. episodes: the tasks with the scripted policy in the sandbox, then on one device
   (``DeviceBackend``: a fresh session and the task's GUI state prepared per episode):
   episodes per second each, and the ratio;
3. pool: the same episodes split over two pool entries on the same server, one thread
   each: episodes per second and the speed-up over one device (the fake driver runs in
   one Node process, so this measures the pool and the server, not phones).

Figures and ratios, never pass or fail.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from bench.machine import cores, cpu_seconds, session_cpu_seconds
from bench.report import BenchReport, json_ready, machine
from contract import Capability, GuiAction, Locator, ReadScreen, Screenshot, Tap, TaskSpec
from envs.appium.backend import ShardDevices, needs_gui
from envs.appium.device import DeviceSession, connect
from envs.appium.pool import DevicePool, DeviceSpec
from envs.appium.profiles import FakeProfile
from envs.backend import Backend
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import free_port
from flows.servers.appium import appium_server
from storage import ArtifactStore


@dataclass(frozen=True)
class DeviceBenchmark:
    cores: int
    episodes: int
    server_start_s: float
    session_ms: float
    read_screen_ms: float
    screenshot_ms: float
    tap_ms: float
    sandbox_eps: float
    device_eps: float
    pool_eps: float
    successes: int
    device_cpu_s: tuple[float, float] = (0.0, 0.0)
    """CPU seconds over the one-device episodes: this process's, the Appium server's."""


def gui_tasks(n: int, seed: int) -> list[TaskSpec]:
    """``n`` Sub-agent tasks that delegate to the GUI agent."""
    found: list[TaskSpec] = []
    draw = 0
    while len(found) < n:
        batch = sample_tasks(4 * n, seed + draw, MobileSandbox(), capability=Capability.SUBAGENT)
        found += [t for t in batch if needs_gui(t)]
        draw += 1
    return found[:n]


def _mean_ms(calls: int, fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) * 1000 / calls


def _episodes_per_s(tasks: Sequence[TaskSpec], backend: Callable[[], Backend]) -> tuple[float, int]:
    start = time.perf_counter()
    done = [run_episode(t, backend(), ScriptedPolicy()) for t in tasks]
    elapsed = time.perf_counter() - start
    return len(tasks) / elapsed, sum(t.verdict.passed for t in done)


def _cpu(appium: int | None) -> tuple[float, float]:
    """CPU seconds so far of this process (and its waited-for children) and of the
    Appium server's session."""
    return cpu_seconds(), session_cpu_seconds(appium) if appium is not None else 0.0


def measure_devices(*, episodes: int = 12, calls: int = 20, seed: int = 0) -> DeviceBenchmark:
    """Start Appium, measure (see the module docstring), stop it whatever happens."""
    tasks = gui_tasks(episodes, seed)
    with tempfile.TemporaryDirectory(prefix="flywheel-bench-devices-") as folder:
        root = Path(folder)
        port = free_port()
        server = appium_server(root / "home", port)
        start = time.perf_counter()
        server.start()
        started = time.perf_counter() - start
        try:
            url = f"http://127.0.0.1:{port}"
            store = ArtifactStore(root / "artifacts")
            profile = FakeProfile()
            caps = profile.capabilities()
            session_ms = _mean_ms(calls, lambda: connect(url, caps, 30).quit())
            device = DeviceSession(connect(url, caps, 30), profile, store.put)

            def tool(action: GuiAction) -> Callable[[], object]:
                return lambda: device.run(action)

            read_ms = _mean_ms(calls, tool(ReadScreen()))
            shot_ms = _mean_ms(calls, tool(Screenshot()))
            tap_ms = _mean_ms(calls, tool(Tap(locator=Locator(by="id", value="nav:home"))))
            device.close()

            sandbox = MobileSandbox()
            sandbox_eps, _ = _episodes_per_s(tasks, lambda: sandbox)
            specs = [DeviceSpec(f"fake-{i}", url, profile) for i in range(2)]
            one = DevicePool(specs[:1], store=store.put)
            appium = server.status().pid
            own, node = _cpu(appium)
            with ShardDevices(one) as shard:
                device_eps, successes = _episodes_per_s(tasks, lambda: shard.backend(0))
            own_after, node_after = _cpu(appium)
            device_cpu = (own_after - own, node_after - node)
            two = DevicePool(specs, store=store.put)
            halves = [tasks[0::2], tasks[1::2]]

            def run_half(half: Sequence[TaskSpec]) -> None:
                with ShardDevices(two) as shard:
                    _episodes_per_s(half, lambda: shard.backend(0))

            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=2) as pool:
                list(pool.map(run_half, halves))
            pool_eps = len(tasks) / (time.perf_counter() - start)
        finally:
            server.stop()
    return DeviceBenchmark(
        cores=cores(),
        episodes=len(tasks),
        server_start_s=started,
        session_ms=session_ms,
        read_screen_ms=read_ms,
        screenshot_ms=shot_ms,
        tap_ms=tap_ms,
        sandbox_eps=sandbox_eps,
        device_eps=device_eps,
        pool_eps=pool_eps,
        successes=successes,
        device_cpu_s=device_cpu,
    )


def report(b: DeviceBenchmark) -> str:
    lines = [
        f"devices (Appium fake driver, {b.cores} cores, {b.episodes} GUI episodes)",
        f"  Appium start-up          {b.server_start_s:8.2f} s",
        f"  new session              {b.session_ms:8.1f} ms",
        f"  read_screen              {b.read_screen_ms:8.1f} ms",
        f"  screenshot (stored)      {b.screenshot_ms:8.1f} ms",
        f"  tap                      {b.tap_ms:8.1f} ms",
        f"  sandbox episodes/s       {b.sandbox_eps:8.1f}",
        f"  device episodes/s        {b.device_eps:8.2f}  "
        f"({b.sandbox_eps / b.device_eps:.0f}x slower than the sandbox; "
        f"{b.successes}/{b.episodes} verified)",
        f"  2-device pool episodes/s {b.pool_eps:8.2f}  "
        f"({b.pool_eps / b.device_eps:.2f}x one device)",
        f"  one device's episodes: CPU {sum(b.device_cpu_s):.2f} s (this process "
        f"{b.device_cpu_s[0]:.2f} s, Appium {b.device_cpu_s[1]:.2f} s) in "
        f"{b.episodes / b.device_eps:.2f} s wall",
    ]
    return "\n".join(lines)


def run_devices_benchmark(*, episodes: int = 12, calls: int = 20, seed: int = 0) -> BenchReport:
    """Measure the fake-driver devices; the figures, and as text."""
    bench = measure_devices(episodes=episodes, calls=calls, seed=seed)
    return BenchReport({**json_ready(bench), "machine": machine()}, report(bench))
