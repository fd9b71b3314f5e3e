"""The serving benchmark starts ``python -m serving`` on two tiny folders, measures it and
reports consistent figures. No timing is asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from bench.serving import run_serving_benchmark

pytestmark = pytest.mark.slow  # a server process: imports torch, loads, probes, swaps


def figure(text: str, stage: str, name: str) -> tuple[str, str]:
    """The value and unit of the table row ``stage``/``name`` (the first such row)."""
    pattern = rf"^  {re.escape(stage)} +{re.escape(name)} +(\S+(?:, \S+)?)  (.*)$"
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no row {stage}/{name} in:\n{text}"
    return match.group(1), match.group(2)


def number(text: str, stage: str, name: str, unit: str) -> float:
    for match in re.finditer(
        rf"^  {re.escape(stage)} +{re.escape(name)} +(\S+)  {re.escape(unit)}",
        text,
        re.MULTILINE,
    ):
        return float(match.group(1).replace(",", ""))
    raise AssertionError(f"no row {stage}/{name} in {unit} in:\n{text}")


def test_the_report_carries_consistent_figures(tmp_path: Path) -> None:
    threads_before = torch.get_num_threads()
    measured = run_serving_benchmark(
        requests=3, episodes=1, max_new_tokens=4, threads=1, workdir=tmp_path
    )
    text = measured.text
    assert torch.get_num_threads() == threads_before  # restored
    assert text.startswith("serving benchmark on ")
    assert "torch threads 1 " in text and "max_new_tokens 4" in text

    assert number(text, "server", "start-up (until /health answers)", "s") > 0
    assert number(text, "completions", "requests (sequential, greedy)", "requests") == 3
    per_second = number(text, "completions", "throughput", "requests/s")
    mean_ms = number(text, "completions", "latency mean", "ms")
    p95_ms = number(text, "completions", "latency p95", "ms")
    assert per_second > 0 and 0 < mean_ms <= p95_ms
    assert per_second == pytest.approx(1000 / mean_ms, rel=0.2)  # sequential requests
    prompt_tokens = number(text, "completions", "prompt tokens per request", "tokens")
    assert 50 < prompt_tokens < 4096  # a real sandbox prompt, within the context
    served_tokens = number(text, "completions", "output tokens", "in")
    assert 0 < served_tokens <= 3 * 4
    assert number(text, "completions", "output tokens", "tokens/s") > 0

    assert number(text, "in-process", "generations (worker thread)", "generations") == 3
    assert number(text, "in-process", "time per generation", "ms") > 0
    # the same folder, prompt and greedy decoding on one thread: the same tokens
    assert number(text, "in-process", "output tokens", "in") == served_tokens
    assert number(text, "in-process", "output tokens", "tokens/s") > 0
    assert number(text, "completions", "server CPU time", "s") > 0
    assert number(text, "episodes", "server CPU time", "s") > 0
    assert number(text, "in-process", "CPU time", "s") > 0

    assert number(text, "episodes", "episodes (max_steps 4)", "episodes") == 1
    assert number(text, "episodes", "throughput", "episodes/s") > 0
    steps = re.search(r"steps/s \((\d+) steps\)", text)
    assert steps and 1 <= int(steps.group(1)) <= 4

    per_swap = number(text, "swap", "seconds per swap", "s (load + probe)")
    both, _ = figure(text, "swap", "to the second folder, back")
    there, back = (float(v) for v in both.split(", "))
    assert there > 0 and back > 0
    assert per_swap == pytest.approx((there + back) / 2, abs=0.011)

    ratios = dict(re.findall(r"^    (\S+): (\S+)$", text, re.MULTILINE))
    assert set(ratios) == {
        "server_vs_in_process.output_tokens_per_second",
        "server_vs_in_process.seconds_per_request",
        "swap_vs_startup.seconds",
    }
    assert all(float(v) > 0 for v in ratios.values())
    assert "untrained tiny one" in text

    figures = json.loads(json.dumps(measured.figures))  # the same figures, as JSON
    assert figures["completions"]["requests"] == 3 and figures["threads"] == 1
    assert figures["completions"]["output_tokens"] == served_tokens
    assert figures["rates"]["completions"]["requests_per_s"] == pytest.approx(per_second, abs=6e-3)
    assert figures["ratios"] == pytest.approx({k: float(v) for k, v in ratios.items()}, abs=6e-4)
    assert (tmp_path / "server.log").is_file()  # the work folder is kept
