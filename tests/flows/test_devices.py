"""The device pool from settings, and its Prefect concurrency limit per device (real
Prefect server): two pools (two processes, as far as the limit knows) never lease one
device at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from prefect import get_client

from contract import Outcome, SubAgentCall
from envs.appium.pool import DeviceLease, DevicePool, DeviceSpec
from envs.appium.profiles import FakeProfile, UiAutomator2Profile
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from envs.screen import permission_id
from flows.devices import device_specs, ensure_device_limits, limit_name, prefect_guard
from flows.round_config import resolve_config
from flows.round_stages import collect_one_shard, manifest_path, shards_root
from flows.servers import prefect_api
from flows.settings import DeviceSettings, DevicesSettings, FlywheelSettings, ModelEndpoint
from storage.task_manifests import write_task_manifest
from tests.fakes import ScriptedChatServer, tool_call_reply


def test_pool_entries_default_to_the_local_appium_server(tmp_path: Path) -> None:
    settings = FlywheelSettings(
        home=tmp_path,
        appium={"port": 4999},
        devices=DevicesSettings(
            pool=[
                DeviceSettings(name="fake-0"),
                DeviceSettings(
                    name="pixel",
                    server="http://10.0.0.5:4723/",
                    driver="uiautomator2",
                    capabilities={"appium:udid": "emulator-5554"},
                    apps={"transit": "com.example.transit"},
                ),
            ]
        ),
    )
    fake, pixel = device_specs(settings)
    assert (fake.name, fake.server, fake.profile) == (
        "fake-0",
        "http://127.0.0.1:4999",
        FakeProfile(),
    )
    assert pixel.server == "http://10.0.0.5:4723"
    assert isinstance(pixel.profile, UiAutomator2Profile)
    assert pixel.profile.packages == {"transit": "com.example.transit"}
    caps = pixel.all_capabilities()
    assert caps["platformName"] == "Android" and caps["appium:udid"] == "emulator-5554"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"name": "Bad Name"}, "name"),
        ({"name": "ok", "driver": "xcuitest"}, "driver"),
        ({"name": "ok", "server": "127.0.0.1:4723"}, "server"),
    ],
)
def test_a_bad_pool_entry_is_refused_naming_its_field(entry: dict[str, str], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DevicesSettings(pool=[DeviceSettings.model_validate(entry)])


def test_device_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="fake-0 is used twice"):
        DevicesSettings(pool=[DeviceSettings(name="fake-0"), DeviceSettings(name="fake-0")])


@pytest.mark.slow
def test_the_prefect_limit_keeps_one_lease_per_device_across_pools(prefect_api_url: str) -> None:
    name = f"phone-{uuid.uuid4().hex[:8]}"
    spec = DeviceSpec(name, "http://127.0.0.1:9", FakeProfile())

    def pool() -> DevicePool:  # a pool per "process": only the Prefect limit is shared
        return DevicePool(
            [spec], guard=prefect_guard, healthy=lambda _: True, poll_s=0.1, lease_timeout_s=1
        )

    with prefect_api(prefect_api_url), get_client(sync_client=True) as client:
        ensure_device_limits([name])
        first_pool, second_pool = pool(), pool()
        first = first_pool.acquire()
        got: list[DeviceLease] = []
        waiter = threading.Thread(target=lambda: got.append(second_pool.acquire()))
        waiter.start()
        time.sleep(3.0)  # past the lease timeout: a busy device is waited for, not failed
        assert got == [] and waiter.is_alive()
        assert client.read_global_concurrency_limit_by_name(limit_name(name)).active_slots == 1
        first_pool.release(first)
        waiter.join(timeout=30)
        assert [lease.name for lease in got] == [name]
        second_pool.release(got[0])
        assert client.read_global_concurrency_limit_by_name(limit_name(name)).active_slots == 0


# A collector that holds a device's slot until it is killed (argv[1]: the device).
_HOLD_FOREVER = """
import sys, time
from flows.devices import ensure_device_limits, prefect_guard
ensure_device_limits([sys.argv[1]])
for attempt in range(30):  # a loaded server may answer the free slot after the 1 s wait,
    guard = prefect_guard(sys.argv[1])  # as the device pool's retries allow for; a guard
    try:                                # is single-use, and kept: collected, it releases
        guard.__enter__()
        break
    except TimeoutError:
        time.sleep(0.5)
else:
    sys.exit("the free slot was never granted")
print("held", flush=True)
while True:
    time.sleep(60)
"""


@pytest.mark.slow
def test_a_killed_holder_frees_its_device_about_a_minute_after_it_died(
    prefect_api_url: str,
) -> None:
    name = f"phone-{uuid.uuid4().hex[:8]}"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_FOREVER, name],
        env={**os.environ, "PREFECT_API_URL": prefect_api_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    held = threading.Event()

    def read() -> None:
        assert holder.stdout is not None
        for line in holder.stdout:
            output.append(line)
            if line.strip() == "held":
                held.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not held.wait(0.2) and holder.poll() is None and time.monotonic() < deadline:
            pass
        assert held.is_set(), (
            f"the holder never took the slot (exit code {holder.poll()}):\n{''.join(output)}"
        )
    finally:
        holder.kill()  # SIGKILL: no context exit, no release, only the lease expiring
        holder.wait(timeout=30)
    killed = time.monotonic()
    reader.join(timeout=10)

    with prefect_api(prefect_api_url), get_client(sync_client=True) as client:
        try:
            with prefect_guard(name):
                pytest.fail("the slot was free right after the kill: the lease ended with it?")
        except TimeoutError:
            pass  # still held just after the kill: only the lease's expiry can free it
        freed_after: float | None = None
        while time.monotonic() - killed < 150:  # lease (60 s) + the repossessor's loop (15 s)
            try:
                with prefect_guard(name):
                    freed_after = time.monotonic() - killed
                break
            except TimeoutError:
                time.sleep(1.0)
        slots = client.read_global_concurrency_limit_by_name(limit_name(name)).active_slots
    assert freed_after is not None, (
        f"{limit_name(name)} was still held 150 s after its holder was killed "
        f"(active slots: {slots}); its lease should expire about a minute after the last renewal"
    )
    assert slots == 0
    print(f"the killed holder's slot was free {freed_after:.0f} s after the kill")


@pytest.mark.slow
def test_a_device_shard_runs_the_llm_gui_agent_the_settings_name(
    prefect_api_url: str, appium_url: str, tmp_path: Path
) -> None:
    task = instantiate(template_named("grant_app_permission"), 3, MobileSandbox())
    [delegation] = [a for a in task.reference_plan if isinstance(a, SubAgentCall)]
    target = permission_id(str(delegation.arguments["app"]), str(delegation.arguments["target"]))
    replies = [
        tool_call_reply("read_screen", "{}"),
        tool_call_reply("tap", json.dumps({"locator": {"by": "id", "value": target}})),
        tool_call_reply("done", json.dumps({"success": True, "summary": "granted"})),
    ]
    with ScriptedChatServer(replies) as chat:
        devices = DevicesSettings(
            route="gui",
            pool=[DeviceSettings(name="fake-0", server=appium_url)],
            gui_agent="llm",
            gui_model=ModelEndpoint(base_url=chat.base_url, model="gui-model"),
        )
        settings = FlywheelSettings(home=tmp_path, devices=devices)
        config = resolve_config(settings, tasks=1, policy="scripted", fault_rate=0.0)
        assert (config.devices, config.gui_agent, config.gui_model) == ("gui", "llm", "gui-model")
        scripted = resolve_config(
            settings.model_copy(update={"devices": DevicesSettings(route="gui")}),
            tasks=1,
            policy="scripted",
            fault_rate=0.0,
        )
        assert config.round_id() != scripted.round_id()
        root = shards_root(tmp_path, settings)
        write_task_manifest([task], manifest_path(root, "round-llm-gui", "device-00000"))
        with prefect_api(prefect_api_url):
            [trajectory] = collect_one_shard(
                tmp_path, "round-llm-gui", "device-00000", config, settings, None, "device"
            )
        requests = chat.requests
    assert trajectory.metadata.outcome is Outcome.SUCCESS
    assert trajectory.metadata.backend == "device" and trajectory.metadata.device == "fake-0"
    [step] = [s for s in trajectory.steps if s.observation]
    assert step.observation == (
        f"GUI agent on fake-0: read_screen() ✓ · tap(id={target}) ✓ · screenshot() ✓"
    )
    assert len(requests) == 3 and {r["model"] for r in requests} == {"gui-model"}
    assert "done" in {t["function"]["name"] for t in requests[0]["tools"]}
