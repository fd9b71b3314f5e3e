"""The near-duplicate benchmark's method: its ground truth is exact and its scoring is
right; one small run prints every detector. No timing is asserted."""

from __future__ import annotations

import itertools
import json

import pytest

from bench.dedup import (
    Truth,
    build_corpus,
    episode_tokens,
    exact_truth,
    run_dedup_benchmark,
    score,
)
from curation.dedup import MinHasher

THRESHOLD = 0.9


@pytest.fixture(scope="module")
def pool() -> list[list[str]]:
    return episode_tokens(40, seed=3)


def _brute_force(documents: list[list[str]]) -> tuple[list[float], int]:
    sets = [frozenset(d) for d in documents]
    best = [0.0] * len(sets)
    pairs = 0
    for j, i in itertools.combinations(range(len(sets)), 2):
        jaccard = len(sets[i] & sets[j]) / len(sets[i] | sets[j])
        if jaccard >= THRESHOLD - 1e-9:
            pairs += 1
            best[i] = max(best[i], jaccard)
    return best, pairs


def test_the_prefix_filtered_join_finds_exactly_the_brute_force_pairs(
    pool: list[list[str]],
) -> None:
    corpus = build_corpus(600, seed=5, pool=pool)
    truth = exact_truth(corpus.documents, THRESHOLD)
    best, pairs = _brute_force(corpus.documents)
    assert truth.pairs == pairs > 0
    assert truth.best == pytest.approx(best)
    assert any(0.0 < b < 1.0 for b in best)  # near, not only identical, pairs are planted


def test_the_same_seed_builds_the_same_corpus(pool: list[list[str]]) -> None:
    first, second = build_corpus(200, seed=1, pool=pool), build_corpus(200, seed=1, pool=pool)
    assert first == second
    assert len(first.documents) == 200
    assert [len(t) for t in first.tokens] == sorted(len(t) for t in first.tokens)


def test_an_exact_detector_scores_one_and_wrong_matches_count_against_it(
    pool: list[list[str]],
) -> None:
    corpus = build_corpus(400, seed=2, pool=pool)
    truth = exact_truth(corpus.documents, THRESHOLD)
    exact = [_best_earlier(truth, i) for i in range(len(truth.sets))]
    perfect = score(exact, truth, THRESHOLD)
    assert (perfect.precision, perfect.recall) == (1.0, 1.0)
    assert perfect.flagged == sum(1 for b in truth.best if b > 0)

    found = [i for i, j in enumerate(exact) if j >= 0]
    missed = list(exact)
    missed[found[0]] = -1
    wrong = list(exact)
    lonely = next(i for i, j in enumerate(exact) if j < 0 and i > 0)
    wrong[lonely] = 0  # a match below the threshold
    assert score(missed, truth, THRESHOLD).recall == pytest.approx(1 - 1 / len(found))
    assert score(wrong, truth, THRESHOLD).precision == pytest.approx(len(found) / (len(found) + 1))


def _best_earlier(truth: Truth, i: int) -> int:
    scored = [
        (len(truth.sets[i] & truth.sets[j]) / len(truth.sets[i] | truth.sets[j]), -j)
        for j in range(i)
    ]
    similarity, neg_j = max(scored, default=(0.0, 1))
    return -neg_j if similarity >= THRESHOLD - 1e-9 else -1


def test_a_small_run_reports_every_detector() -> None:
    MinHasher().sketches([["a", "b"]] * 1000)  # rensa's thread pool runs: no fork now
    report = run_dedup_benchmark(items=300, seed=0, repeat=1, pool_episodes=20)
    detectors = (
        "curator's: rensa",
        "datasketch, xxh32 hashfunc",
        "datasketch, default SHA-1",
        "datasketch, xxh32, the curator's bands",
    )
    for name in (*detectors, "ratio datasketch"):
        assert name in report.text
    figures = json.loads(json.dumps(report.figures))
    assert [d["name"] for d in figures["detectors"]][1:] == list(detectors[1:])
    assert detectors[0] in figures["detectors"][0]["name"]
    assert figures["detectors"][0]["to_curator_ratio"] == 1.0
    for d in figures["detectors"]:
        assert 0.0 <= d["precision"] <= 1.0 and 0.0 <= d["recall"] <= 1.0
        assert d["total_s"] == d["sign_s"] + d["index_query_s"]
        assert f"{d['precision']:9.4f} {d['recall']:7.4f}" in report.text
