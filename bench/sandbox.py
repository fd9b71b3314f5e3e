"""Sandbox throughput: episodes/s, tool calls/s, and the cost of one tool call against a
bare Python function making the same state change. Single process, so one core."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from bench.report import BenchReport, json_ready, machine
from contract import InitialConditions, ToolCall
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks

TARGET_CALLS_PER_S = 20_000


def _per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _time(fn: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def run_benchmark(episodes: int = 2000, seed: int = 0) -> BenchReport:
    sandbox = MobileSandbox()
    tasks = sample_tasks(episodes, seed, sandbox)

    # Tool calls inside episodes' plans: reset excluded, every action of every plan timed.
    calls = 0
    call_seconds = call_cpu = 0.0
    reset_seconds = 0.0
    for task in tasks:
        start = time.perf_counter()
        sandbox.reset(task)
        reset_seconds += time.perf_counter() - start
        start, cpu = time.perf_counter(), time.process_time()
        for action in task.reference_plan:
            sandbox.execute(action)
        call_seconds += time.perf_counter() - start
        call_cpu += time.process_time() - cpu
        calls += len(task.reference_plan)

    # Whole episodes: reset, scripted policy with faults, verification, trajectory record.
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    start, cpu = time.perf_counter(), time.process_time()
    trajectories = [run_episode(task, sandbox, policy) for task in tasks]
    episode_seconds, episode_cpu = time.perf_counter() - start, time.process_time() - cpu
    episode_calls = sum(t.cost.tool_calls for t in trajectories)

    # One write tool call against a bare function doing the same state change.
    sandbox.reset_to(InitialConditions(seed=seed), ["send_message"])
    action = ToolCall(tool="send_message", arguments={"contact_id": "c-1", "text": "hi"})
    state = sandbox.state()
    sent = state["messages.sent"]
    counter = [0]

    def bare() -> None:
        counter[0] += 1
        row_id = f"sms-{counter[0]}"
        sent[row_id] = {"id": row_id, "contact_id": "c-1", "text": "hi", "date": "2026-03-14"}

    repeat = 20_000
    tool_s = _time(lambda: sandbox.execute(action), repeat)
    bare_s = _time(bare, repeat)
    calls_per_s = _per_second(calls, call_seconds)

    lines = [
        f"sandbox benchmark: {episodes} tasks (seed {seed}), one process; "
        f"load average {os.getloadavg()[0]:.1f}",
        f"  tool calls in plans        {calls_per_s:12,.0f} calls/s  "
        f"(target {TARGET_CALLS_PER_S:,}: {calls_per_s / TARGET_CALLS_PER_S:.1f}x; "
        f"{call_seconds:.2f} s wall, {call_cpu:.2f} s CPU)",
        f"  reset from seed            {_per_second(len(tasks), reset_seconds):12,.0f} resets/s",
        f"  full episodes              {_per_second(len(tasks), episode_seconds):12,.0f} episodes/s"
        f"  ({_per_second(episode_calls, episode_seconds):,.0f} tool calls/s incl. reset, "
        f"policy, verification, records; {episode_seconds:.2f} s wall, {episode_cpu:.2f} s CPU)",
        f"  one send_message call      {tool_s * 1e6:12.2f} us",
        f"  bare function, same change {bare_s * 1e6:12.2f} us",
        f"  ratio tool call / bare     {tool_s / bare_s:12.1f}x",
    ]
    figures = {
        "episodes": episodes,
        "seed": seed,
        "tool_calls_in_plans": {
            "calls_per_s": calls_per_s,
            "aim_calls_per_s": TARGET_CALLS_PER_S,
            "wall_s": call_seconds,
            "cpu_s": call_cpu,
        },
        "resets_per_s": _per_second(len(tasks), reset_seconds),
        "full_episodes": {
            "episodes_per_s": _per_second(len(tasks), episode_seconds),
            "tool_calls_per_s": _per_second(episode_calls, episode_seconds),
            "wall_s": episode_seconds,
            "cpu_s": episode_cpu,
        },
        "send_message_call_s": tool_s,
        "bare_function_s": bare_s,
        "tool_call_to_bare_ratio": tool_s / bare_s,
        "machine": machine(),
    }
    return BenchReport(json_ready(figures), "\n".join(lines))
