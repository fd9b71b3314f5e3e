"""Near-duplicate detection: the curator's (rensa's MinHash/LSH) against datasketch's.

**Data.** ``items`` documents, each the set of action shingles the curator hashes
(:func:`curation.dedup.action_shingles` of a token sequence). Tokens are real: the
:func:`curation.dedup.action_tokens` of scripted sandbox episodes (30% injected faults),
joined end to end in random orders; a base document is a window of those streams. Its
length follows the real episodes' lengths (2 to 15 steps, the default step budget) for
70% of bases, and is uniform in 16 to 100 steps (a raised budget) for the rest. Bases
are distinct shingle sets. A quarter of bases get 1 to 3 planted variants: 0 to 3
random edits (substitute, insert or delete a step, swap two), and half of the time a
repeated step too (collapsed away: the same set). Items are ordered as the curator keeps
them: fewest steps first, then key. Everything follows from ``seed``.

**Workload.** What the curator's ``_near_duplicates`` does, on one pool (the curator
splits it by task and outcome first): sign every document, then for each item in order,
look for the most similar earlier item whose *estimated* Jaccard similarity is at least
the threshold (the LSH candidates, confirmed on the signatures), and index it. Every
item is indexed, kept or not, so the ground truth does not depend on a detector's
earlier answers. Both detectors get the same documents, threshold and permutations
(``CuratorConfig``'s defaults):

- the curator's: ``MinHasher.sketches`` over every document (rensa's
  ``RMinHash.from_token_sets``), then ``NearDuplicateIndex.match_sketch`` and
  ``add_sketch`` (rensa's ``RMinHashLSH``, candidates confirmed on the sketches);
- datasketch: ``MinHash.bulk`` (its documented fast path for many sets), then
  ``MinHashLSH.query``, each candidate confirmed with ``MinHash.jaccard`` (as its
  documentation advises), then ``MinHashLSH.insert``. Rows: its default SHA-1 hash; an
  xxh32 ``hashfunc`` (the documented way to hash faster, and the headline row); and
  the xxh32 hash with our bands and rows forced through ``params``.

**Truth.** Exact Jaccard similarity over *all* items, not a sample: an exact
prefix-filtered similarity join (AllPairs: shingles ranked rarest first; two sets with
Jaccard similarity at least t share a shingle among their first ``s - ceil(t*s) + 1``),
each candidate verified on the sets. An item is a true near-duplicate when an earlier
item has exact Jaccard similarity at least the threshold. A detector *flags* an item
when it returns a match; the flag is correct when that match's exact similarity is at
least the threshold. Precision = correct / flagged; recall = correct / true
near-duplicates, also split by the item's best exact similarity (1, or in [t, 1)).

**Time and memory.** Each detector runs ``repeat`` times, interleaved with the others,
each time in a new child process (spawned: a forked child would inherit rensa's thread
pool without its threads and hang) that receives the documents, then signs and runs
index+query, timed with ``perf_counter``; the fastest of each phase is kept (other processes share
the cores), and CPU time is reported beside it. In the first child it then runs again
under ``tracemalloc``: "Python MB" is that run's peak of traced allocations (the Python
objects and numpy arrays the detector makes; the shared input documents are not
counted). Memory a native library allocates (rensa's Rust heap) is invisible to
``tracemalloc``, so "RSS MB" gives the growth of the child's resident high-water mark
over its first run (the mark reset once the documents arrived, ``/proc/self/clear_refs``):
it counts native memory, but may undercount Python's (heap freed while unpickling is
reused without growing the RSS).
Figures, never pass or fail.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
import statistics
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import xxhash
from datasketch import MinHash, MinHashLSH

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from bench.report import BenchReport, json_ready, machine
from curation.dedup import MinHasher, NearDuplicateIndex, action_shingles, action_tokens, lsh_bands
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks

DEFAULT_ITEMS = 200_000
POOL_EPISODES = 1000
SHORT_SHARE = 0.7
MAX_SHORT_STEPS = 15
MAX_LONG_STEPS = 100
CLUSTER_SHARE = 0.25
MAX_VARIANTS = 3
MAX_EDITS = 3
STREAMS = 64
CURATORS = "curator's: rensa RMinHash + RMinHashLSH"
_EPS = 1e-9

Tokens = list[str]


@dataclass(frozen=True)
class Corpus:
    """The documents in the curator's keep order, and the planted pairs' similarities."""

    keys: list[str]
    tokens: list[Tokens]
    documents: list[list[str]]
    planted: list[float]
    pool_episodes: int


@dataclass(frozen=True)
class Truth:
    """Per item, the best exact Jaccard similarity to an earlier item if it is at least
    the threshold, else 0.0; and the number of such pairs."""

    best: list[float]
    pairs: int
    sets: list[frozenset[int]]


@dataclass(frozen=True)
class Run:
    """One detector's answers: per item, the index of the earlier match or -1."""

    name: str
    bands: tuple[int, int]
    sign_s: float
    query_s: float
    cpu_s: float
    peak_bytes: int
    rss_bytes: int
    matches: list[int]


@dataclass(frozen=True)
class Score:
    flagged: int
    correct: int
    precision: float
    recall: float
    recall_identical: float
    recall_near: float


# -- data -----------------------------------------------------------------------------


def episode_tokens(episodes: int, seed: int) -> list[Tokens]:
    """Action tokens of ``episodes`` scripted sandbox episodes (30% injected faults)."""
    sandbox = MobileSandbox()
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    return [
        action_tokens(run_episode(task, sandbox, policy).steps)
        for task in sample_tasks(episodes, seed, sandbox)
    ]


def build_corpus(items: int, seed: int, pool: Sequence[Tokens]) -> Corpus:
    """``items`` documents: distinct bases cut from real token streams, and variants."""
    rng = np.random.default_rng(seed)
    pool = [t for t in pool if t]
    vocab = sorted({tok for t in pool for tok in t})
    streams = [_stream(rng, pool) for _ in range(STREAMS)]
    short_lengths = [min(max(len(t), 2), MAX_SHORT_STEPS) for t in pool]
    seen: set[frozenset[str]] = set()
    made: list[Tokens] = []
    planted: list[float] = []
    while len(made) < items:
        base, shingles = _new_base(rng, streams, short_lengths, seen)
        made.append(base)
        if rng.random() >= CLUSTER_SHARE:
            continue
        for _ in range(int(rng.integers(1, MAX_VARIANTS + 1))):
            if len(made) >= items:
                break
            variant = _edit(base, rng, vocab)
            made.append(variant)
            planted.append(_jaccard(shingles, frozenset(action_shingles(variant))))
    keys = [f"t{i:07d}" for i in range(len(made))]
    order = sorted(range(len(made)), key=lambda i: (len(made[i]), keys[i]))
    tokens = [made[i] for i in order]
    return Corpus(
        keys=[keys[i] for i in order],
        tokens=tokens,
        documents=[action_shingles(t) for t in tokens],
        planted=planted,
        pool_episodes=len(pool),
    )


def _stream(rng: np.random.Generator, pool: Sequence[Tokens]) -> Tokens:
    """The pool's episodes end to end in random orders, at least two long windows long."""
    stream: Tokens = []
    while len(stream) < 2 * MAX_LONG_STEPS:
        stream += [tok for k in rng.permutation(len(pool)) for tok in pool[k]]
    return stream


def _new_base(
    rng: np.random.Generator,
    streams: Sequence[Tokens],
    short_lengths: Sequence[int],
    seen: set[frozenset[str]],
) -> tuple[Tokens, frozenset[str]]:
    while True:
        if rng.random() < SHORT_SHARE:
            length = short_lengths[int(rng.integers(len(short_lengths)))]
        else:
            length = int(rng.integers(MAX_SHORT_STEPS + 1, MAX_LONG_STEPS + 1))
        stream = streams[int(rng.integers(len(streams)))]
        start = int(rng.integers(len(stream) - length + 1))
        window = stream[start : start + length]
        shingles = frozenset(action_shingles(window))
        if shingles not in seen:
            seen.add(shingles)
            return window, shingles


def _edit(base: Tokens, rng: np.random.Generator, vocab: Sequence[str]) -> Tokens:
    out = list(base)
    for _ in range(int(rng.integers(0, MAX_EDITS + 1))):
        kind, pos = int(rng.integers(4)), int(rng.integers(len(out)))
        if kind == 0:
            out[pos] = vocab[int(rng.integers(len(vocab)))]
        elif kind == 1:
            out.insert(pos, vocab[int(rng.integers(len(vocab)))])
        elif kind == 2 and len(out) > 1:
            del out[pos]
        elif kind == 3 and pos + 1 < len(out):
            out[pos], out[pos + 1] = out[pos + 1], out[pos]
    if rng.random() < 0.5:  # a repeated call: collapsed, so the same shingles
        pos = int(rng.integers(len(out)))
        out.insert(pos, out[pos])
    return out


def _jaccard(
    first: frozenset[str] | frozenset[int], second: frozenset[str] | frozenset[int]
) -> float:
    union = len(first | second)
    return len(first & second) / union if union else 1.0


# -- exact truth ----------------------------------------------------------------------


def exact_truth(documents: Sequence[Sequence[str]], threshold: float) -> Truth:
    """Exact all-pairs join at ``threshold`` (prefix filtering, every candidate verified)."""
    ids: dict[str, int] = {}
    int_docs = [sorted({ids.setdefault(s, len(ids)) for s in doc}) for doc in documents]
    frequency = Counter(i for doc in int_docs for i in doc)
    rank = {sid: r for r, sid in enumerate(sorted(ids.values(), key=lambda s: (frequency[s], s)))}
    ranked = [sorted(rank[i] for i in doc) for doc in int_docs]
    sets = [frozenset(doc) for doc in ranked]
    postings: dict[int, list[int]] = {}
    best = [0.0] * len(ranked)
    pairs = 0
    for i, doc in enumerate(ranked):
        size = len(doc)
        prefix = doc[: size - math.ceil(threshold * size - _EPS) + 1]
        seen: set[int] = set()
        for token in prefix:
            for j in postings.get(token, ()):
                if j in seen:
                    continue
                seen.add(j)
                other = len(ranked[j])
                if threshold * max(size, other) > min(size, other) + _EPS:
                    continue
                inter = len(sets[i] & sets[j])
                union = size + other - inter
                if inter >= threshold * union - _EPS:
                    pairs += 1
                    best[i] = max(best[i], inter / union)
        for token in prefix:
            postings.setdefault(token, []).append(i)
    return Truth(best=best, pairs=pairs, sets=sets)


def score(matches: Sequence[int], truth: Truth, threshold: float) -> Score:
    """Precision and recall of ``matches`` (per item, an earlier item's index or -1)."""
    flagged = correct = correct_identical = correct_near = 0
    for i, j in enumerate(matches):
        if j < 0:
            continue
        if j >= i:
            raise ValueError(f"item {i} matched a later item {j}")
        flagged += 1
        if _jaccard(truth.sets[i], truth.sets[j]) >= threshold - _EPS:
            correct += 1
            if truth.best[i] >= 1.0 - _EPS:
                correct_identical += 1
            else:
                correct_near += 1
    true_items = sum(1 for b in truth.best if b > 0.0)
    identical = sum(1 for b in truth.best if b >= 1.0 - _EPS)
    return Score(
        flagged=flagged,
        correct=correct,
        precision=correct / flagged if flagged else 1.0,
        recall=correct / true_items if true_items else 1.0,
        recall_identical=correct_identical / identical if identical else 1.0,
        recall_near=correct_near / (true_items - identical) if true_items > identical else 1.0,
    )


# -- detectors ------------------------------------------------------------------------


def run_curators(corpus: Corpus, threshold: float, num_perm: int) -> Run:
    cpu = time.process_time()
    hasher = MinHasher(num_perm)
    started = time.perf_counter()
    sketches = hasher.sketches(corpus.documents)
    signed = time.perf_counter()
    index = NearDuplicateIndex(threshold, hasher=hasher)
    found: list[str | None] = []
    for key, sketch in zip(corpus.keys, sketches, strict=True):
        found.append(index.match_sketch(sketch)[0])
        index.add_sketch(key, sketch)
    done = time.perf_counter()
    return Run(
        CURATORS,
        (index.bands, index.rows),
        signed - started,
        done - signed,
        time.process_time() - cpu,
        0,
        0,
        _positions(corpus.keys, found),
    )


def run_datasketch(
    corpus: Corpus,
    threshold: float,
    num_perm: int,
    *,
    name: str,
    fast_hash: bool,
    params: tuple[int, int] | None = None,
) -> Run:
    cpu = time.process_time()
    started = time.perf_counter()
    encoded = ([s.encode() for s in doc] for doc in corpus.documents)  # ours encodes too
    if fast_hash:
        minhashes = MinHash.bulk(encoded, num_perm=num_perm, hashfunc=xxhash.xxh32_intdigest)
    else:  # the default hash: SHA-1
        minhashes = MinHash.bulk(encoded, num_perm=num_perm)
    signed = time.perf_counter()
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, params=params)
    position: dict[str, int] = {}
    matches: list[int] = []
    for i, (key, minhash) in enumerate(zip(corpus.keys, minhashes, strict=True)):
        best, best_similarity = -1, 0.0
        for candidate in lsh.query(minhash):
            j = position[candidate]
            similarity = minhash.jaccard(minhashes[j])
            if similarity >= threshold and (
                similarity > best_similarity or (similarity == best_similarity and j < best)
            ):
                best, best_similarity = j, similarity
        matches.append(best)
        lsh.insert(key, minhash)
        position[key] = i
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    return Run(name, (lsh.b, lsh.r), signed - started, done - signed, cpu, 0, 0, matches)


def _positions(keys: Sequence[str], found: Sequence[str | None]) -> list[int]:
    position = {key: i for i, key in enumerate(keys)}
    return [position[k] if k is not None else -1 for k in found]


def _in_child(fn: Callable[[], Run], *, trace: bool) -> Run:
    """Run ``fn`` (picklable, with its data) in a spawned child, timed; with ``trace``,
    then again under ``tracemalloc``, whose peak becomes ``peak_bytes``."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(fn, trace, send))
    child.start()
    send.close()
    try:
        outcome = receive.recv()
    except EOFError:
        outcome = "the child exited without an answer (out of memory?)"
    child.join()
    if isinstance(outcome, str):
        raise RuntimeError(f"benchmark child failed: {outcome}")
    if not isinstance(outcome, Run):
        raise RuntimeError(f"benchmark child answered {type(outcome).__name__}")
    return outcome


def _child_main(fn: Callable[[], Run], trace: bool, send: Connection) -> None:
    try:
        resident = _reset_peak_resident()
        run = fn()
        grown = max(0, _status_bytes("VmHWM") - resident) if resident else 0
        peak = 0
        if trace:
            gc.collect()
            tracemalloc.start()
            fn()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        send.send(replace(run, peak_bytes=peak, rss_bytes=grown))
    except BaseException:
        send.send(traceback.format_exc())
    finally:
        send.close()


def _reset_peak_resident() -> int:
    """Reset this process's resident high-water mark (``/proc/self/clear_refs``, Linux)
    to its resident set now, and return that; 0 where it cannot be reset."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return 0
    return _status_bytes("VmRSS")


def _status_bytes(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def _best(runs: Sequence[Run]) -> Run:
    """The fastest sign and the fastest index+query of repeated runs (same answers)."""
    return replace(
        runs[0],
        sign_s=min(r.sign_s for r in runs),
        query_s=min(r.query_s for r in runs),
        cpu_s=min(r.cpu_s for r in runs),
        peak_bytes=max(r.peak_bytes for r in runs),
        rss_bytes=max(r.rss_bytes for r in runs),
    )


# -- the report -----------------------------------------------------------------------


def run_dedup_benchmark(
    items: int = DEFAULT_ITEMS,
    seed: int = 0,
    repeat: int = 2,
    pool_episodes: int = POOL_EPISODES,
) -> BenchReport:
    """Build the corpus, run every detector ``repeat`` times (interleaved, best kept),
    score them: the figures, and as text."""
    config = CuratorConfig()
    threshold, num_perm = config.near_duplicate_threshold, config.num_perm
    started = time.perf_counter()
    corpus = build_corpus(items, seed, episode_tokens(pool_episodes, seed))
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    truth = exact_truth(corpus.documents, threshold)
    truth_s = time.perf_counter() - started

    our_bands = lsh_bands(num_perm, threshold)
    detectors: list[Callable[[], Run]] = [
        partial(run_curators, corpus, threshold, num_perm),
        partial(
            run_datasketch,
            corpus,
            threshold,
            num_perm,
            name="datasketch, xxh32 hashfunc",
            fast_hash=True,
        ),
        partial(
            run_datasketch,
            corpus,
            threshold,
            num_perm,
            name="datasketch, default SHA-1",
            fast_hash=False,
        ),
        partial(
            run_datasketch,
            corpus,
            threshold,
            num_perm,
            name="datasketch, xxh32, the curator's bands",
            fast_hash=True,
            params=our_bands,
        ),
    ]
    runs: list[list[Run]] = [[] for _ in detectors]
    for attempt in range(repeat):
        for detector, done in zip(detectors, runs, strict=True):
            done.append(_in_child(detector, trace=attempt == 0))
    ours, *theirs = [_best(done) for done in runs]
    return _report(
        items, seed, repeat, corpus, truth, threshold, num_perm, build_s, truth_s, ours, theirs
    )


def _report(
    items: int,
    seed: int,
    repeat: int,
    corpus: Corpus,
    truth: Truth,
    threshold: float,
    num_perm: int,
    build_s: float,
    truth_s: float,
    ours: Run,
    theirs: Sequence[Run],
) -> BenchReport:
    sizes = [len(set(d)) for d in corpus.documents]
    steps = [len(t) for t in corpus.tokens]
    true_items = sum(1 for b in truth.best if b > 0.0)
    identical = sum(1 for b in truth.best if b >= 1.0 - _EPS)
    planted = corpus.planted
    lines = [
        f"near-duplicate benchmark: {items:,} items (seed {seed}), threshold {threshold}, "
        f"{num_perm} permutations; best of {repeat}; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores",
        f"  documents: action-shingle sets from {corpus.pool_episodes:,} scripted episodes' "
        f"tokens; {statistics.mean(steps):.1f} steps and {statistics.mean(sizes):.1f} "
        f"shingles on average ({sum(sizes):,} in all); built in {build_s:.1f} s",
        f"  planted variants: {len(planted):,}; exact Jaccard to their base: "
        f"1.0: {sum(1 for j in planted if j >= 1 - _EPS):,}, "
        f"[{threshold}, 1): {sum(1 for j in planted if threshold - _EPS <= j < 1 - _EPS):,}, "
        f"below: {sum(1 for j in planted if j < threshold - _EPS):,}",
        f"  truth (exact join over all items, {truth_s:.1f} s): {true_items:,} items have an "
        f"earlier one at exact Jaccard >= {threshold} ({identical:,} identical sets, "
        f"{true_items - identical:,} in [{threshold}, 1)); {truth.pairs:,} such pairs",
        "",
        f"  {'detector':45s} {'bands':>6s} {'sign s':>8s} {'index+query s':>14s} "
        f"{'total s':>8s} {'CPU s':>7s} {'x curator':>9s} {'Python MB':>9s} {'RSS MB':>7s} "
        f"{'precision':>9s} {'recall':>7s} {'(=1 / <1)':>13s}",
    ]
    ours_total = ours.sign_s + ours.query_s
    detectors: list[dict[str, object]] = []
    for run in (ours, *theirs):
        s = score(run.matches, truth, threshold)
        total = run.sign_s + run.query_s
        detectors.append(
            {
                "name": run.name,
                "bands": list(run.bands),
                "sign_s": run.sign_s,
                "index_query_s": run.query_s,
                "total_s": total,
                "cpu_s": run.cpu_s,
                "to_curator_ratio": total / ours_total,
                "python_peak_bytes": run.peak_bytes,
                "rss_growth_bytes": run.rss_bytes,
                "precision": s.precision,
                "recall": s.recall,
                "recall_identical": s.recall_identical,
                "recall_near": s.recall_near,
            }
        )
        lines.append(
            f"  {run.name:45s} {run.bands[0]:>3d}x{run.bands[1]:<2d} {run.sign_s:8.2f} "
            f"{run.query_s:14.2f} {total:8.2f} {run.cpu_s:7.2f} {total / ours_total:8.2f}x "
            f"{run.peak_bytes / 2**20:9.0f} {run.rss_bytes / 2**20:7.0f} "
            f"{s.precision:9.4f} {s.recall:7.4f} "
            f"({s.recall_identical:.3f} / {s.recall_near:.3f})"
        )
    head = theirs[0]
    lines += [
        "",
        f"  ratio {head.name} / the curator's: sign {head.sign_s / ours.sign_s:.2f}x, "
        f"index+query {head.query_s / ours.query_s:.2f}x, "
        f"total {(head.sign_s + head.query_s) / ours_total:.2f}x",
        "  (bands: bands x rows; datasketch picks its own for the threshold unless given; "
        "CPU s: of the whole run (the best of the repeats); Python MB: tracemalloc peak of a "
        "second, untimed run; RSS MB: growth of the resident high-water mark (native "
        "memory included); "
        "recall split: items whose best earlier match is an identical set / in "
        f"[{threshold}, 1))",
    ]
    figures = {
        "items": items,
        "seed": seed,
        "repeat": repeat,
        "threshold": threshold,
        "num_perm": num_perm,
        "pool_episodes": corpus.pool_episodes,
        "planted_variants": len(planted),
        "truth": {
            "items_with_a_match": true_items,
            "identical": identical,
            "pairs": truth.pairs,
            "seconds": truth_s,
        },
        "corpus_build_s": build_s,
        "detectors": detectors,
        "machine": machine(),
    }
    return BenchReport(json_ready(figures), "\n".join(lines))
