"""The device pool from settings, with a Prefect concurrency limit per device.

Each ``[[devices.pool]]`` entry becomes a pool device; a device without ``server`` uses
the local Appium server (``[appium] port``). Every device has a Prefect global
concurrency limit ``device-<name>`` of one slot, held for as long as a collector leases
the device, so two flow runs (or two machines) never drive one phone at once; the
limits show in the Prefect UI under Concurrency. The slot's lease lasts a minute and is
renewed while held, so a holder that crashed (killed, machine lost) frees its device about
a minute after it died.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager

from prefect import get_client
from prefect.concurrency.sync import concurrency

from contract import FlywheelError
from envs.appium.gui_agent import GuiAgent
from envs.appium.pool import DevicePool, DeviceSpec, server_ready
from envs.appium.profiles import driver_profile
from flows.settings import FlywheelSettings
from storage import ArtifactStore

LIMIT_PREFIX = "device-"
_GUARD_WAIT_S = 1.0
# The server's minimum: a crashed holder's slot is freed after ~1 min, not Prefect's 5 min.
_GUARD_LEASE_S = 60.0
_POOLS: dict[str, DevicePool] = {}
_POOLS_LOCK = threading.Lock()


def device_specs(settings: FlywheelSettings) -> list[DeviceSpec]:
    """The pool entries of the settings."""
    local = f"http://127.0.0.1:{settings.appium.port}"
    return [
        DeviceSpec(
            name=entry.name,
            server=entry.server or local,
            profile=driver_profile(entry.driver, entry.apps),
            capabilities=dict(entry.capabilities),
        )
        for entry in settings.devices.pool
    ]


def require_a_ready_device(settings: FlywheelSettings) -> None:
    """Refuse to route tasks to a pool none of whose servers answers: every attempt
    would otherwise wait out the lease timeout."""
    specs = device_specs(settings)
    if any(server_ready(spec.server) for spec in specs):
        return
    where = ", ".join(f"{spec.name} at {spec.server}" for spec in specs)
    raise FlywheelError(
        f"devices.route is gui but no device of the pool answers ({where}): start the local "
        "Appium server with `flywheel server start appium`, or fix [[devices.pool]]"
    )


def gui_agent(settings: FlywheelSettings) -> GuiAgent | None:
    """The GUI agent the settings name for devices: None for the scripted one (the
    backend's default), an ``LLMGuiAgent`` on ``[devices] gui_model`` for ``llm``."""
    endpoint = settings.devices.gui_model
    if settings.devices.gui_agent != "llm" or endpoint is None:
        return None
    from agents.gui_agent import LLMGuiAgent
    from agents.policies.openai_policy import make_client

    key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
    client = make_client(endpoint.base_url, key, endpoint.timeout_s, endpoint.max_response_bytes)
    return LLMGuiAgent(
        client,
        endpoint.model,
        temperature=endpoint.temperature,
        retry=settings.retries.llm,
        max_response_bytes=endpoint.max_response_bytes,
    )


def limit_name(device: str) -> str:
    return LIMIT_PREFIX + device


def ensure_device_limits(devices: Sequence[str]) -> None:
    """A one-slot Prefect concurrency limit per device (created or reset to one slot)."""
    with get_client(sync_client=True) as client:
        for device in devices:
            client.upsert_global_concurrency_limit_by_name(limit_name(device), limit=1)


def prefect_guard(device: str) -> AbstractContextManager[object]:
    """Holds the device's Prefect slot; ``TimeoutError`` when another run holds it."""
    return concurrency(
        limit_name(device),
        occupy=1,
        timeout_seconds=_GUARD_WAIT_S,
        lease_duration=_GUARD_LEASE_S,
        strict=True,
    )


def device_pool(settings: FlywheelSettings, *, guarded: bool = True) -> DevicePool:
    """This process's pool for the settings' devices (one per distinct configuration,
    shared by the collection threads); with ``guarded`` each lease holds its device's
    Prefect limit, which this creates."""
    specs = device_specs(settings)
    key = repr((settings.devices.model_dump(), settings.appium.port, guarded, settings.home))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            if guarded:
                ensure_device_limits([s.name for s in specs])
            store = ArtifactStore(settings.artifacts_location)
            pool = DevicePool(
                specs,
                store=store.put,
                lease_timeout_s=settings.devices.lease_timeout_s,
                command_timeout_s=settings.devices.command_timeout_s,
                guard=prefect_guard if guarded else None,
            )
            _POOLS[key] = pool
    return pool
