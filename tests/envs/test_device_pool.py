"""The device pool: one lease per device, health, preferences, cross-process guards, and
sessions recreated when broken (pool logic without a server; sessions on ``appium_url``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
from selenium.common.exceptions import WebDriverException

from contract import InvalidInputError, TaskSpec
from envs.appium.backend import DeviceBackend, ShardDevices
from envs.appium.pool import (
    LEASED,
    LEASED_ELSEWHERE,
    DeviceLease,
    DevicePool,
    DeviceSpec,
    DeviceUnavailableError,
    server_ready,
)
from envs.appium.profiles import FakeProfile
from envs.backend import BackendFaultError
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from flows.servers import free_port

TIMEOUT_S = 0.3
POLL_S = 0.05


def spec(name: str, server: str | None = None) -> DeviceSpec:
    return DeviceSpec(name=name, server=server or f"http://{name}", profile=FakeProfile())


def pool(
    *names: str,
    healthy: Callable[[str], bool] = lambda url: True,
    guard: Callable[[str], AbstractContextManager[object]] | None = None,
) -> DevicePool:
    return DevicePool(
        [spec(n) for n in names],
        healthy=healthy,
        guard=guard,
        lease_timeout_s=TIMEOUT_S,
        poll_s=POLL_S,
    )


class Guard:
    """A per-device lock of another process: ``TimeoutError`` while a device is in ``busy``."""

    def __init__(self, *busy: str) -> None:
        self.busy = set(busy)
        self.events: list[tuple[str, str]] = []

    def __call__(self, name: str) -> AbstractContextManager[object]:
        return self._hold(name)

    @contextmanager
    def _hold(self, name: str) -> Iterator[None]:
        if name in self.busy:
            raise TimeoutError(f"{name} is held elsewhere")
        self.events.append(("enter", name))
        try:
            yield
        finally:
            self.events.append(("exit", name))


def later(seconds: float, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` in another thread after ``seconds``."""

    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def permission_task() -> TaskSpec:
    return instantiate(
        template_named("grant_app_permission"),
        3,
        MobileSandbox(),
        params={"app": "gym", "permission": "location"},
    )


# -- leases -------------------------------------------------------------------------------


def test_a_pool_needs_devices_with_unique_names() -> None:
    with pytest.raises(InvalidInputError, match="empty"):
        DevicePool([])
    with pytest.raises(InvalidInputError, match="unique"):
        DevicePool([spec("a"), spec("a", "http://other")])


def test_one_lease_per_device_and_a_busy_wait_outlasts_the_lease_timeout() -> None:
    devices = pool("solo")
    first = devices.acquire()
    assert first.name == "solo"
    releaser = later(0.5, lambda: devices.release(first))  # past the 0.3 s lease timeout
    start = time.monotonic()
    second = devices.acquire()
    waited = time.monotonic() - start
    releaser.join()
    assert second.name == "solo"
    assert second is not first
    assert waited >= 0.45  # waited while busy, and did not time out
    devices.release(second)


def test_a_released_device_is_leased_again_at_once() -> None:
    devices = pool("solo")
    with devices.lease() as lease:
        assert lease.name == "solo"
    start = time.monotonic()
    with devices.lease() as again:
        assert again.name == "solo"
    assert time.monotonic() - start < POLL_S


def test_concurrent_collectors_get_different_devices() -> None:
    devices = pool("a", "b", "c")
    leases: list[DeviceLease] = []
    lock = threading.Lock()

    def take() -> None:
        lease = devices.acquire()
        with lock:
            leases.append(lease)

    threads = [threading.Thread(target=take) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert sorted(lease.name for lease in leases) == ["a", "b", "c"]
    for lease in leases:
        devices.release(lease)


def test_avoid_prefers_other_devices_but_does_not_forbid_them() -> None:
    devices = pool("a", "b")
    with devices.lease() as plain:
        assert plain.name == "a"  # the pool's order
    preferred = devices.acquire(avoid=["a"])
    assert preferred.name == "b"
    fallback = devices.acquire(avoid=["a"])  # b is busy: a is better than waiting
    assert fallback.name == "a"
    devices.release(preferred)
    devices.release(fallback)
    with devices.lease(avoid={"a", "b"}) as either:
        assert either.name == "a"


# -- health -------------------------------------------------------------------------------


def test_an_unhealthy_pool_names_each_device_and_why() -> None:
    checked: list[str] = []
    up = False

    def healthy(url: str) -> bool:
        checked.append(url)
        return up

    devices = pool("a", "b", healthy=healthy)
    start = time.monotonic()
    with pytest.raises(DeviceUnavailableError) as caught:
        devices.acquire()
    assert time.monotonic() - start >= TIMEOUT_S
    assert str(caught.value) == (
        "no device free and healthy within 0.3 s ("
        "a: Appium at http://a does not answer ready; "
        "b: Appium at http://b does not answer ready)"
    )
    assert {"http://a", "http://b"} <= set(checked)
    assert len(checked) > 2  # checked again while waiting
    up = True  # nothing stays leased after a failed acquire
    with devices.lease() as lease:
        assert lease.name == "a"


def test_an_unhealthy_device_is_skipped_and_freed() -> None:
    down = {"http://a"}
    devices = pool("a", "b", healthy=lambda url: url not in down)
    with devices.lease() as lease:
        assert lease.name == "b"
    down.clear()
    with devices.lease() as lease:
        assert lease.name == "a"  # not left marked leased by the failed check


def test_a_device_that_recovers_in_time_is_leased() -> None:
    answers = iter([False, False, False])
    devices = pool("a", healthy=lambda url: next(answers, True))
    with devices.lease() as lease:
        assert lease.name == "a"


def test_busy_and_unhealthy_devices_time_out_with_both_reasons() -> None:
    devices = pool("a", "b", healthy=lambda url: url != "http://b")
    held = devices.acquire()
    assert held.name == "a"
    with pytest.raises(DeviceUnavailableError) as caught:
        devices.acquire()
    message = str(caught.value)
    assert f"a: {LEASED};" in message
    assert "b: Appium at http://b does not answer ready" in message
    devices.release(held)


def test_server_ready_is_false_where_nothing_answers() -> None:
    assert server_ready(f"http://127.0.0.1:{free_port()}", timeout_s=1) is False


# -- guards -------------------------------------------------------------------------------


def test_the_guard_is_entered_on_acquire_and_exited_on_release() -> None:
    guard = Guard()
    devices = pool("a", "b", guard=guard)
    lease = devices.acquire()
    assert guard.events == [("enter", "a")]
    devices.release(lease)
    assert guard.events == [("enter", "a"), ("exit", "a")]
    with devices.lease() as again:
        assert again.name == "a"
    assert guard.events[-2:] == [("enter", "a"), ("exit", "a")]


def test_a_device_held_elsewhere_is_skipped() -> None:
    guard = Guard("a")
    devices = pool("a", "b", guard=guard)
    with devices.lease() as lease:
        assert lease.name == "b"
    assert guard.events == [("enter", "b"), ("exit", "b")]


def test_a_device_held_elsewhere_is_waited_for_past_the_lease_timeout() -> None:
    guard = Guard("a")
    devices = pool("a", guard=guard)
    freer = later(0.5, guard.busy.clear)
    start = time.monotonic()
    with devices.lease() as lease:
        assert lease.name == "a"
    freer.join()
    assert time.monotonic() - start >= 0.45
    assert guard.events == [("enter", "a"), ("exit", "a")]


def test_held_elsewhere_is_named_when_the_pool_gives_up() -> None:
    guard = Guard("a")
    devices = pool("a", "b", healthy=lambda url: url != "http://b", guard=guard)
    with pytest.raises(DeviceUnavailableError) as caught:
        devices.acquire()
    assert f"a: {LEASED_ELSEWHERE};" in str(caught.value)
    assert guard.events == []  # the unhealthy device's guard is never taken


def test_a_guard_that_fails_otherwise_raises_and_leaves_the_device_free() -> None:
    failing = True

    @contextmanager
    def broken_guard(name: str) -> Iterator[None]:
        if failing:
            raise RuntimeError("the concurrency service is down")
        yield

    devices = pool("a", guard=broken_guard)
    with pytest.raises(RuntimeError, match="concurrency service"):
        devices.acquire()
    failing = False
    with devices.lease() as lease:
        assert lease.name == "a"


# -- sessions on a real server ------------------------------------------------------------


def test_a_lease_marked_broken_without_a_session_is_broken() -> None:
    lease = DeviceLease(spec("a"), None, 1.0, None)
    assert not lease.broken
    lease.mark_broken()  # creating its session failed, say
    assert lease.broken


def test_a_lease_creates_its_session_and_recreates_it_once_broken(appium_url: str) -> None:
    devices = DevicePool([spec("phone", appium_url)], lease_timeout_s=5)
    lease = devices.acquire()  # health checked against the real server
    assert lease.sessions_created == 0 and not lease.broken
    first = lease.session()
    assert lease.session() is first
    assert lease.sessions_created == 1
    assert "nav:back" in first.driver.page_source
    lease.mark_broken()
    assert lease.broken and first.broken
    second = lease.session()
    assert second is not first
    assert lease.sessions_created == 2 and not lease.broken
    with pytest.raises(WebDriverException):
        first.driver.page_source  # noqa: B018 - the broken session was ended
    third = lease.session(fresh=True)
    assert third is not second and lease.sessions_created == 3
    devices.release(lease)
    with pytest.raises(WebDriverException):
        third.driver.page_source  # noqa: B018 - release ended the session
    lease.close()  # closing twice is fine


def test_a_session_that_cannot_be_created_raises() -> None:
    dead = DeviceLease(spec("dead", f"http://127.0.0.1:{free_port()}"), None, 2.0, None)
    with pytest.raises(Exception, match=r"Connection refused|Max retries"):
        dead.session()
    assert dead.sessions_created == 0


# -- a shard's devices --------------------------------------------------------------------


def test_a_shard_keeps_its_lease_while_it_works(appium_url: str) -> None:
    devices = DevicePool([spec("phone-1", appium_url), spec("phone-2", appium_url)])
    task = permission_task()
    with ShardDevices(devices) as shard:
        first = shard.backend(0)
        first.reset(task)
        again = shard.backend(0)
        again.reset(task)
        assert first.device == again.device == "phone-1"
        assert shard.failed == []
    # Closing the shard released its device.
    with devices.lease() as lease:
        assert lease.name == "phone-1"


def test_after_its_lease_breaks_a_shard_moves_to_the_other_device(appium_url: str) -> None:
    """The first device's server went away after its health check."""
    dead = f"http://127.0.0.1:{free_port()}"
    guard = Guard()
    devices = DevicePool(
        [spec("phone-1", dead), spec("phone-2", appium_url)],
        healthy=lambda url: True,
        guard=guard,
        lease_timeout_s=TIMEOUT_S,
        poll_s=POLL_S,
    )
    task = permission_task()
    with ShardDevices(devices) as shard:
        first = shard.backend(0)
        assert first.device == "phone-1"
        with pytest.raises(BackendFaultError, match="device phone-1: preparing it failed"):
            first.reset(task)
        retry = shard.backend(1)
        assert retry.device == "phone-2"
        retry.reset(task)  # a working device
        assert shard.failed == ["phone-1"]
        assert guard.events == [("enter", "phone-1"), ("exit", "phone-1"), ("enter", "phone-2")]
    assert guard.events[-1] == ("exit", "phone-2")


def test_with_no_healthy_device_the_backend_fails_at_reset() -> None:
    devices = pool("a", "b", healthy=lambda url: False)
    with ShardDevices(devices) as shard:
        backend = shard.backend(0)
        assert isinstance(backend, DeviceBackend)
        assert backend.device == "none"
        with pytest.raises(BackendFaultError) as caught:
            backend.reset(permission_task())
        message = str(caught.value)
        assert message.startswith("no device: no device free and healthy within 0.3 s")
        assert "a: Appium at http://a does not answer ready" in message
        with pytest.raises(BackendFaultError, match="no session"):
            backend.evidence()


def test_the_sandbox_half_of_an_episode_is_named_after_its_device_and_attempt() -> None:
    """Its simulated faults are seeded by that name: a retry, on another device or the
    same one, meets other faults (the same sandbox for every attempt would repeat them)."""
    named: list[str] = []

    def sandbox(device: str) -> MobileSandbox:
        named.append(device)
        return MobileSandbox(backend_fault_rate=0.5, device=device)

    devices = pool("a", "b", healthy=lambda url: True)
    with ShardDevices(devices, sandbox) as shard:
        shard.backend(0)
        lease = shard._lease
        assert lease is not None
        lease.mark_broken()
        shard.backend(1)
        shard.backend(2)
    assert named == ["a#0", "b#1", "b#2"]
    task = permission_task()
    faults = []
    for name in list(named):
        box = MobileSandbox(backend_fault_rate=0.5, device=name)
        box.reset(task)
        faults.append(tuple(box._faults.random() for _ in range(8)))
    assert len(set(faults)) == 3
