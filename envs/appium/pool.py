"""The device pool: one lease per device, health checks, sessions recreated when broken.

A pool entry is a device behind an Appium server (a device farm is several entries,
on one server or many). ``acquire`` waits until a device is free and healthy (its
server answers ``/status`` ready), preferring devices the caller has not seen fail;
a ``guard`` (the flows pass a Prefect concurrency limit per device) keeps one lease
per device across processes too. A lease's session is created on first use and again
after it broke.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from contract import FlywheelError, InvalidInputError
from envs.appium.device import DeviceSession, Store, connect
from envs.appium.profiles import DriverProfile

Guard = Callable[[str], AbstractContextManager[object]]
"""A per-device lock beyond this process (e.g. a Prefect concurrency limit), by name."""
_LOCAL_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))
HEALTH_TIMEOUT_S = 3.0
LEASED = "leased"
LEASED_ELSEWHERE = "leased by another process"
_BUSY = frozenset({LEASED, LEASED_ELSEWHERE})


class _SkipError(Exception):
    """This device cannot be leased now."""


class DeviceUnavailableError(FlywheelError):
    """No device of the pool was free and healthy in time."""


@dataclass(frozen=True)
class DeviceSpec:
    """A pool entry: its name, its Appium server, its driver and extra capabilities."""

    name: str
    server: str
    profile: DriverProfile
    capabilities: Mapping[str, Any] = field(default_factory=dict)

    def all_capabilities(self) -> dict[str, Any]:
        return {**self.profile.capabilities(), **self.capabilities}


def server_ready(server: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether the Appium server at ``server`` answers ``/status`` ready."""
    try:
        with _LOCAL_HTTP.open(server.rstrip("/") + "/status", timeout=timeout_s) as response:
            body = json.loads(response.read())
    except (OSError, ValueError):
        return False
    value = body.get("value") if isinstance(body, dict) else None
    return isinstance(value, dict) and value.get("ready") is True


class DeviceLease:
    """One device held by one collector until released."""

    def __init__(
        self,
        spec: DeviceSpec,
        store: Store | None,
        command_timeout_s: float,
        guard: AbstractContextManager[object] | None,
    ) -> None:
        self.spec = spec
        self._store = store
        self._timeout = command_timeout_s
        self.guard = guard
        """The pool's guard held for this lease (exited when the pool releases it)."""
        self._session: DeviceSession | None = None
        self._failed = False
        """Marked broken with no session to mark (creating one failed)."""
        self.sessions_created = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def broken(self) -> bool:
        return self._failed or (self._session is not None and self._session.broken)

    def session(self, *, fresh: bool = False) -> DeviceSession:
        """The lease's session: created when there is none, it broke, or ``fresh``."""
        if self._session is not None and (fresh or self._session.broken):
            self._session.close()
            self._session = None
        if self._session is None:
            driver = connect(self.spec.server, self.spec.all_capabilities(), self._timeout)
            self._session = DeviceSession(driver, self.spec.profile, self._store)
            self._failed = False
            self.sessions_created += 1
        return self._session

    def mark_broken(self) -> None:
        self._failed = True
        if self._session is not None:
            self._session.broken = True

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


class DevicePool:
    """Devices leased one collector at a time (thread-safe within a process)."""

    def __init__(
        self,
        devices: Sequence[DeviceSpec],
        *,
        store: Store | None = None,
        lease_timeout_s: float = 120.0,
        command_timeout_s: float = 30.0,
        guard: Guard | None = None,
        poll_s: float = 0.5,
        healthy: Callable[[str], bool] = server_ready,
    ) -> None:
        if not devices:
            raise InvalidInputError("devices.pool", "the device pool is empty")
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            raise InvalidInputError("devices.pool", "device names must be unique")
        self.devices = tuple(devices)
        self._store = store
        self._lease_timeout = lease_timeout_s
        self._command_timeout = command_timeout_s
        self._guard = guard
        self._poll = poll_s
        self._healthy = healthy
        self._lock = threading.Lock()
        self._leased: set[str] = set()

    def acquire(self, avoid: Collection[str] = ()) -> DeviceLease:
        """A free, healthy device, preferring those not in ``avoid``.

        Waits while devices are busy (leased here or by another process); raises
        ``DeviceUnavailableError``, saying why per device, once no device has been
        both free and healthy for the lease timeout.
        """
        deadline = time.monotonic() + self._lease_timeout
        while True:
            why: dict[str, str] = {}
            for spec in sorted(self.devices, key=lambda d: d.name in avoid):
                lease = self._try(spec, why)
                if lease is not None:
                    return lease
            if all(reason in _BUSY for reason in why.values()):
                deadline = time.monotonic() + self._lease_timeout
            elif time.monotonic() >= deadline:
                reasons = "; ".join(f"{name}: {reason}" for name, reason in why.items())
                raise DeviceUnavailableError(
                    f"no device free and healthy within {self._lease_timeout:g} s ({reasons})"
                )
            time.sleep(self._poll)

    def _try(self, spec: DeviceSpec, why: dict[str, str]) -> DeviceLease | None:
        with self._lock:
            if spec.name in self._leased:
                why[spec.name] = LEASED
                return None
            self._leased.add(spec.name)
        try:
            if not self._healthy(spec.server):
                why[spec.name] = f"Appium at {spec.server} does not answer ready"
                raise _SkipError
            held = self._guard(spec.name) if self._guard is not None else None
            if held is not None:
                try:
                    held.__enter__()
                except TimeoutError:
                    why[spec.name] = LEASED_ELSEWHERE
                    raise _SkipError from None
            return DeviceLease(spec, self._store, self._command_timeout, held)
        except BaseException as exc:
            with self._lock:
                self._leased.discard(spec.name)
            if isinstance(exc, _SkipError):
                return None
            raise

    def release(self, lease: DeviceLease) -> None:
        """End the lease: its session closes and the device is free again."""
        try:
            lease.close()
        finally:
            guard, lease.guard = lease.guard, None
            if guard is not None:
                guard.__exit__(None, None, None)
            with self._lock:
                self._leased.discard(lease.name)

    @contextmanager
    def lease(self, avoid: Collection[str] = ()) -> Iterator[DeviceLease]:
        held = self.acquire(avoid)
        try:
            yield held
        finally:
            self.release(held)
