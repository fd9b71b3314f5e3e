"""Model-server throughput: start-up, completions, the same generation in-process,
episodes through the endpoint, and what a model swap costs.

**Set-up**, timed apart: a byte-level tokenizer trained on the opening prompts of a few
sandbox tasks (rendered with all the sandbox's tools, what an episode's prompt holds),
and two tiny untrained Qwen2 folders sharing it (``save_model``; seeds ``seed`` and
``seed + 1``, the second for the swap).

**Work**, against ``python -m serving`` on a free 127.0.0.1 port (``--threads`` and
``OMP_NUM_THREADS``: the benchmark's threads; ``--max-new-tokens``: ``max_new_tokens``):

1. start-up: seconds from launching the process until ``/health`` answers (imports,
   loading and probing the model, binding the port);
2. completions: ``requests`` sequential chat completions through the ``openai`` client,
   greedy, ``max_tokens=max_new_tokens``, on one real prompt (an ``OpenAIPolicy``
   session's opening messages and tools for a sampled sandbox task), after one untimed
   warm-up request: requests per second, mean and p95 latency, prompt and output tokens
   (from ``usage``), output tokens per second;
3. in-process: the same generation without the server (``LocalChatModel`` on the same
   folder, same prompt, greedy, same ``max_new_tokens``; rendering, tokenizing and
   ``generate``), ``requests`` times after one warm-up, once the server has stopped:
   tokens per second, and the ratio server over in-process (what HTTP, JSON and parsing
   cost). The model is set up as the server sets it up (``serving.generation``'s
   ``load_folder`` and ``probe_model``, in the main thread) and generates in a worker
   thread, as the server's endpoint does (uvicorn's thread pool): on a busy machine,
   torch's intra-op threads make generation several times slower in another threading
   set-up (generating in the main thread only, or in a worker without the main thread's
   probe first), and the ratio would measure that instead of the server;
4. episodes: ``episodes`` sandbox episodes through ``OpenAIPolicy`` against the server
   (``run_episode``, ``max_steps`` 4): episodes and steps per second;
5. swap: ``serving.client.load_model`` to the second folder, then back; seconds per swap
   (what a promotion or a rollback costs the endpoint). After each, ``probe`` must answer
   with the model id just loaded, or the benchmark raises instead of printing figures.

The model is untrained: its replies are mostly malformed tool calls, which the harness
records as errors and goes on; every reply is still generated, sent and parsed, so the
throughput is the server's. Figures and ratios, never pass or fail.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam
from transformers.utils import logging as hf_logging

from agents.policies.base import TaskView
from agents.policies.chat_format import Message, format_tools, opening_messages
from agents.policies.openai_policy import OpenAIPolicy, make_client
from agents.runner import run_episode
from bench.machine import (
    cores,
    cpu_seconds,
    process_cpu_seconds,
    torch_processor,
    torch_threads,
    work_folder,
)
from bench.report import BenchReport, json_ready
from contract import InvalidInputError, Outcome, RetryPolicy, TaskSpec
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import free_port
from serving.client import ServingError, health, load_model, probe
from serving.command import serve_command
from serving.generation import load_folder, probe_model
from training.base_model import (
    BaseModel,
    device,
    render,
    save_model,
    tiny_model,
    train_tokenizer,
)
from training.chat_model import LocalChatModel

EPISODE_STEPS = 4
CORPUS_TASKS = 3
"""Sandbox tasks whose rendered opening prompts the tokenizer is trained on."""
START_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 120.0
SERVED_AS = "champion"
MODELS = (("model-bench-a", "tiny-bench-a"), ("model-bench-b", "tiny-bench-b"))
"""Registry id and name of the first folder (served first) and of the second (the swap)."""


@dataclass(frozen=True)
class Completions:
    """``requests`` sequential completions through the ``openai`` client."""

    requests: int
    seconds: float
    latencies_ms: tuple[float, ...]
    prompt_tokens: int
    """Per request (the same prompt every time)."""
    output_tokens: int
    """All requests together."""

    @property
    def requests_per_second(self) -> float:
        return _rate(self.requests, self.seconds)

    @property
    def mean_ms(self) -> float:
        return sum(self.latencies_ms) / len(self.latencies_ms)

    @property
    def p95_ms(self) -> float:
        ordered = sorted(self.latencies_ms)  # nearest rank
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]

    @property
    def tokens_per_second(self) -> float:
        return _rate(self.output_tokens, self.seconds)


@dataclass(frozen=True)
class InProcess:
    """The same generations by ``LocalChatModel``: rendering, tokenizing, ``generate``."""

    generations: int
    seconds: float
    prompt_tokens: int
    output_tokens: int

    @property
    def mean_ms(self) -> float:
        return 1000 * self.seconds / self.generations

    @property
    def tokens_per_second(self) -> float:
        return _rate(self.output_tokens, self.seconds)


@dataclass(frozen=True)
class Episodes:
    episodes: int
    steps: int
    seconds: float

    @property
    def episodes_per_second(self) -> float:
        return _rate(self.episodes, self.seconds)

    @property
    def steps_per_second(self) -> float:
        return _rate(self.steps, self.seconds)


@dataclass(frozen=True)
class ServingBenchmark:
    threads: int
    cores: int
    load_average: float
    cpu: str
    """The CPU and torch's kernels (``torch_processor``): figures differ between hosts."""
    device: str
    seed: int
    max_new_tokens: int
    parameters: int
    vocabulary: int
    setup_seconds: float
    startup_seconds: float
    completions: Completions
    in_process: InProcess
    episodes: Episodes
    swap_seconds: tuple[float, float]
    """Loading the second folder, then the first again."""
    server_cpu_seconds: tuple[float, float] = (0.0, 0.0)
    """The server process's CPU time over the completions, and over the episodes."""
    in_process_cpu_seconds: float = 0.0

    @property
    def ratios(self) -> dict[str, float]:
        c, p = self.completions, self.in_process
        return {
            "server_vs_in_process.output_tokens_per_second": _ratio(
                c.tokens_per_second, p.tokens_per_second
            ),
            "server_vs_in_process.seconds_per_request": _ratio(c.mean_ms, p.mean_ms),
            "swap_vs_startup.seconds": _ratio(
                sum(self.swap_seconds) / len(self.swap_seconds), self.startup_seconds
            ),
        }


def run_serving_benchmark(
    *,
    requests: int = 20,
    episodes: int = 4,
    max_new_tokens: int = 32,
    threads: int | None = None,
    seed: int = 0,
    workdir: Path | None = None,
) -> BenchReport:
    """Build two tiny model folders, serve the first with ``python -m serving`` and
    measure it (see the module docstring); the figures, and as text. ``threads``: torch
    threads of the server and of the in-process run (default: the cores this process may
    use). ``workdir`` is kept; without it a temporary folder is used and removed. The
    server is stopped whatever happens."""
    bench = measure_serving(
        requests=requests,
        episodes=episodes,
        max_new_tokens=max_new_tokens,
        threads=threads,
        seed=seed,
        workdir=workdir,
    )
    c, p, e = bench.completions, bench.in_process, bench.episodes
    rates = {
        "completions": {
            "requests_per_s": c.requests_per_second,
            "latency_mean_ms": c.mean_ms,
            "latency_p95_ms": c.p95_ms,
            "output_tokens_per_s": c.tokens_per_second,
        },
        "in_process": {"latency_mean_ms": p.mean_ms, "output_tokens_per_s": p.tokens_per_second},
        "episodes": {"episodes_per_s": e.episodes_per_second, "steps_per_s": e.steps_per_second},
    }
    figures = {**json_ready(bench), "rates": rates, "ratios": bench.ratios}
    return BenchReport(json_ready(figures), report(bench))


def measure_serving(
    *,
    requests: int = 20,
    episodes: int = 4,
    max_new_tokens: int = 32,
    threads: int | None = None,
    seed: int = 0,
    workdir: Path | None = None,
) -> ServingBenchmark:
    """The figures ``run_serving_benchmark`` reports."""
    for field, value in (
        ("requests", requests),
        ("episodes", episodes),
        ("max_new_tokens", max_new_tokens),
    ):
        if value < 1:
            raise InvalidInputError(field, f"{value} is below 1")
    with torch_threads(threads) as used, work_folder(workdir, "flywheel-bench-serving-") as work:
        started = time.perf_counter()
        sandbox = MobileSandbox()
        messages, tools = prompt(sandbox, seed)
        folders = model_folders(work / "models", sandbox, seed)
        setup_seconds = time.perf_counter() - started

        with served(folders[0], work / "server.log", used, max_new_tokens, threads) as server:
            base_url, startup_seconds, pid = server
            cpu = process_cpu_seconds(pid)
            completions = measure_completions(base_url, messages, tools, requests, max_new_tokens)
            completions_cpu, cpu = process_cpu_seconds(pid) - cpu, process_cpu_seconds(pid)
            episode_figures = measure_episodes(base_url, sandbox, episodes, seed)
            episodes_cpu = process_cpu_seconds(pid) - cpu
            swaps = (
                swap(base_url, folders[1], *MODELS[1]),
                swap(base_url, folders[0], *MODELS[0]),
            )
        base = _served_in_process(folders[0])
        cpu = cpu_seconds()
        in_process = measure_in_process(base, messages, tools, requests, max_new_tokens)
        in_process_cpu = cpu_seconds() - cpu
    return ServingBenchmark(
        threads=used,
        cores=cores(),
        load_average=os.getloadavg()[0],
        cpu=torch_processor(),
        device=str(device()),
        seed=seed,
        max_new_tokens=max_new_tokens,
        parameters=sum(p.numel() for p in base.model.parameters()),
        vocabulary=len(base.tokenizer),
        setup_seconds=setup_seconds,
        startup_seconds=startup_seconds,
        completions=completions,
        in_process=in_process,
        episodes=episode_figures,
        swap_seconds=swaps,
        server_cpu_seconds=(completions_cpu, episodes_cpu),
        in_process_cpu_seconds=in_process_cpu,
    )


# -- set-up ----------------------------------------------------------------------------


def view_of(sandbox: MobileSandbox, task: TaskSpec) -> TaskView:
    """What ``run_episode`` shows a policy for ``task`` (``sandbox`` is reset to it)."""
    sandbox.reset(task)
    return TaskView(
        goal=task.goal,
        tools=sandbox.tool_specs(),
        subagents=sandbox.subagent_specs(),
        max_steps=EPISODE_STEPS,
    )


def prompt(sandbox: MobileSandbox, seed: int) -> tuple[list[Message], list[dict[str, Any]]]:
    """The opening messages and tools of an episode on the first task sampled from
    ``seed``: what an ``OpenAIPolicy`` session sends first."""
    view = view_of(sandbox, sample_tasks(1, seed, sandbox)[0])
    return opening_messages(view), format_tools(view)


def model_folders(root: Path, sandbox: MobileSandbox, seed: int) -> tuple[Path, Path]:
    """Two tiny model folders (seeds ``seed`` and ``seed + 1``) under ``root``, sharing a
    tokenizer trained on rendered sandbox prompts (so a prompt is a few hundred tokens,
    not thousands of bytes)."""
    corpus = []
    for task in sample_tasks(CORPUS_TASKS, seed, sandbox):
        view = view_of(sandbox, task)
        corpus.append(render(opening_messages(view), format_tools(view)))
    tokenizer = train_tokenizer(corpus)
    folders = []
    for model_seed in (seed, seed + 1):
        folder = root / f"tiny-{model_seed}"
        save_model(BaseModel(tiny_model(tokenizer, seed=model_seed), tokenizer, "tiny"), folder)
        folders.append(folder)
    return folders[0], folders[1]


# -- the server ------------------------------------------------------------------------


@contextmanager
def served(
    folder: Path, log: Path, threads: int, max_new_tokens: int, omp_threads: int | None
) -> Iterator[tuple[str, float, int]]:
    """``python -m serving`` on ``folder`` (as ``MODELS[0]``) on a free port: its base URL,
    the seconds until ``/health`` answered, and its process id. Terminated (killed if it
    lingers) after."""
    port = free_port()
    model_id, name = MODELS[0]
    argv = serve_command(
        folder, model_id, name, port, max_new_tokens=max_new_tokens, threads=threads
    )
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    base_url = f"http://127.0.0.1:{port}"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        startup = _wait_healthy(process, base_url, log, started)
        yield base_url, startup, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_healthy(
    process: subprocess.Popen[bytes], base_url: str, log: Path, started: float
) -> float:
    deadline = started + START_TIMEOUT_S
    while time.perf_counter() < deadline:
        if health(base_url, timeout_s=1.0) is not None:
            return time.perf_counter() - started
        if process.poll() is not None:
            break
        time.sleep(0.05)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise ServingError(
        f"python -m serving did not answer {base_url}/health within {START_TIMEOUT_S:.0f} s "
        f"(exit status {process.poll()}); its log ({log}) ends:\n{tail}"
    )


# -- the work --------------------------------------------------------------------------


def measure_completions(
    base_url: str,
    messages: list[Message],
    tools: list[dict[str, Any]],
    requests: int,
    max_new_tokens: int,
) -> Completions:
    """``requests`` greedy completions of the same prompt, one at a time, after one warm-up."""
    client = make_client(base_url + "/v1", None, REQUEST_TIMEOUT_S)

    def complete() -> tuple[int, int]:
        completion = client.chat.completions.create(
            model=SERVED_AS,
            messages=cast("list[ChatCompletionMessageParam]", messages),
            tools=cast("list[ChatCompletionToolUnionParam]", tools),
            tool_choice="auto",
            temperature=0.0,
            max_tokens=max_new_tokens,
        )
        if completion.usage is None:
            raise ServingError(f"a completion from {base_url} has no usage")
        return completion.usage.prompt_tokens, completion.usage.completion_tokens

    complete()  # warm-up, untimed
    latencies = []
    prompt_tokens = output_tokens = 0
    started = time.perf_counter()
    for _ in range(requests):
        sent = time.perf_counter()
        prompt_tokens, completion_tokens = complete()
        latencies.append(1000 * (time.perf_counter() - sent))
        output_tokens += completion_tokens
    return Completions(
        requests=requests,
        seconds=time.perf_counter() - started,
        latencies_ms=tuple(latencies),
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
    )


def measure_in_process(
    base: BaseModel,
    messages: list[Message],
    tools: list[dict[str, Any]],
    generations: int,
    max_new_tokens: int,
) -> InProcess:
    """``generations`` greedy generations of the prompt by ``LocalChatModel``, each
    rendered and tokenized anew (as the server does per request), after one warm-up, in
    a worker thread (as the server's; ``base`` loaded and probed as it does it)."""
    chat = LocalChatModel(
        base.model, base.tokenizer, "in-process", temperature=0.0, max_new_tokens=max_new_tokens
    )

    def once() -> tuple[int, int]:
        ids = chat.encode(chat.render(messages, tools, prompt=True))
        new, _ = chat.generate(ids)
        return len(ids), len(new)

    def timed() -> InProcess:
        once()  # warm-up, untimed
        prompt_tokens = output_tokens = 0
        started = time.perf_counter()
        for _ in range(generations):
            prompt_tokens, generated = once()
            output_tokens += generated
        return InProcess(
            generations=generations,
            seconds=time.perf_counter() - started,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
        )

    with ThreadPoolExecutor(max_workers=1) as worker:  # where the server generates too
        return worker.submit(timed).result()


def measure_episodes(base_url: str, sandbox: MobileSandbox, episodes: int, seed: int) -> Episodes:
    """``episodes`` sandbox episodes through ``OpenAIPolicy`` (greedy) against the server.
    ``ServingError`` when the endpoint failed in any (a figure of failures is no figure)."""
    client = make_client(base_url + "/v1", None, REQUEST_TIMEOUT_S)
    policy = OpenAIPolicy(client, SERVED_AS, temperature=0.0, retry=RetryPolicy.once())
    tasks = sample_tasks(episodes, seed, sandbox)
    started = time.perf_counter()
    runs = [run_episode(task, sandbox, policy, max_steps=EPISODE_STEPS) for task in tasks]
    seconds = time.perf_counter() - started
    for run in runs:
        if run.metadata.outcome is Outcome.BACKEND_ERROR:
            errors = [s.feedback.error.message for s in run.steps if s.feedback.error]
            raise ServingError(
                f"an episode through {base_url} failed at the endpoint: "
                f"{errors[-1] if errors else 'no error recorded'}"
            )
    return Episodes(episodes=len(runs), steps=sum(len(r.steps) for r in runs), seconds=seconds)


def swap(base_url: str, folder: Path, model_id: str, name: str) -> float:
    """Seconds to make the server serve ``folder`` as ``model_id``; ``ServingError`` when
    ``probe`` then answers with another model."""
    started = time.perf_counter()
    load_model(base_url, str(folder), model_id, name)
    seconds = time.perf_counter() - started
    answered = probe(base_url, SERVED_AS)
    if answered != model_id:
        raise ServingError(
            f"after loading {folder} as {model_id}, {base_url} answers as {answered!r}: "
            "the swap did not take"
        )
    return seconds


# -- the report ------------------------------------------------------------------------


def report(bench: ServingBenchmark) -> str:
    """The figures as a table (stage, figure, value, unit), the ratios, and a note."""
    c, p, e = bench.completions, bench.in_process, bench.episodes
    to_b, back = bench.swap_seconds
    lines = [
        f"serving benchmark on {bench.device}: torch threads {bench.threads} "
        f"({bench.cores} cores), load average {bench.load_average:.1f}, seed {bench.seed}",
        f"  CPU: {bench.cpu}",
        f"  model: tiny Qwen2 ({bench.parameters / 1e6:.2f}M params, {bench.vocabulary:,}-token "
        f"vocabulary trained on rendered sandbox prompts), two folders; max_new_tokens "
        f"{bench.max_new_tokens}; set-up (untimed) {bench.setup_seconds:.1f} s",
    ]
    rows: list[tuple[str, str, str, str]] = [
        ("server", "start-up (until /health answers)", f"{bench.startup_seconds:.2f}", "s"),
        ("completions", "requests (sequential, greedy)", f"{c.requests}", "requests"),
        ("completions", "throughput", f"{c.requests_per_second:.2f}", "requests/s"),
        ("completions", "latency mean", f"{c.mean_ms:.1f}", "ms"),
        ("completions", "latency p95", f"{c.p95_ms:.1f}", "ms"),
        ("completions", "prompt tokens per request", f"{c.prompt_tokens:,}", "tokens"),
        ("completions", "output tokens", f"{c.output_tokens:,}", f"in {c.seconds:.2f} s"),
        ("completions", "output tokens", f"{c.tokens_per_second:,.0f}", "tokens/s"),
        ("completions", "server CPU time", f"{bench.server_cpu_seconds[0]:.2f}", "s"),
        ("in-process", "generations (worker thread)", f"{p.generations}", "generations"),
        ("in-process", "time per generation", f"{p.mean_ms:.1f}", "ms"),
        ("in-process", "output tokens", f"{p.output_tokens:,}", f"in {p.seconds:.2f} s"),
        ("in-process", "output tokens", f"{p.tokens_per_second:,.0f}", "tokens/s"),
        ("in-process", "CPU time", f"{bench.in_process_cpu_seconds:.2f}", "s"),
        (
            "overhead",
            "server latency - in-process time",
            f"{c.mean_ms - p.mean_ms:.1f}",
            "ms/request",
        ),
        ("episodes", f"episodes (max_steps {EPISODE_STEPS})", f"{e.episodes}", "episodes"),
        ("episodes", "throughput", f"{e.episodes_per_second:.2f}", "episodes/s"),
        ("episodes", "steps", f"{e.steps_per_second:.2f}", f"steps/s ({e.steps} steps)"),
        ("episodes", "server CPU time", f"{bench.server_cpu_seconds[1]:.2f}", "s"),
        ("swap", "seconds per swap", f"{(to_b + back) / 2:.2f}", "s (load + probe)"),
        ("swap", "to the second folder, back", f"{to_b:.2f}, {back:.2f}", "s"),
    ]
    header = ("stage", "figure", "value", "unit")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]

    def line(row: tuple[str, str, str, str]) -> str:
        stage, figure, value, unit = row
        return f"  {stage:{widths[0]}}  {figure:{widths[1]}}  {value:>{widths[2]}}  {unit}".rstrip()

    lines += [line(header), line(("-" * widths[0], "-" * widths[1], "-" * widths[2], "----"))]
    lines += [line(row) for row in rows]
    lines.append("  ratios:")
    lines += [f"    {name}: {value:.3f}" for name, value in bench.ratios.items()]
    lines.append(
        "  note: the model is the untrained tiny one: its replies are mostly malformed tool "
        "calls, which is fine for throughput (each is generated, sent and parsed all the same)"
    )
    return "\n".join(lines)


# -- helpers ---------------------------------------------------------------------------


def _served_in_process(folder: Path) -> BaseModel:
    """``folder`` loaded and probed as the server does at start (``MODELS[0]``), without
    transformers' weight-loading progress bar."""
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        loaded = load_folder(folder, *MODELS[0])
    finally:
        if shown:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
    probe_model(loaded)
    return BaseModel(loaded.chat.model, loaded.chat.tokenizer, loaded.name)


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0
