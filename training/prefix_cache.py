"""The keys and values of a model's last generation, reused by its next one.

An episode's next turn re-reads its whole conversation, and the next task of the same
tool set starts with the same system turn: without reuse, every reply prefills thousands
of tokens the model already computed (about 30% of the nano base's generation time). A
``PrefixCache`` keeps the last generation's keys and values with the token ids they
belong to; the next generation keeps the part its context starts with and prefills only
the rest, as a serving engine's prefix cache does, with one slot.

The kept keys and values belong to the weights that computed them: an optimizer step,
a loaded state dict or a move to another device or dtype starts a fresh cache (every
in-place change of a parameter bumps its version counter). One generation uses the
cache at a time; a second one meanwhile, from another thread, generates without it.
Reused keys were computed in other batches than a full prefill's, so logits may differ
in their last bits and a greedy reply may change where two tokens nearly tie.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from transformers import DynamicCache, PreTrainedModel

WeightsKey = tuple[int, str, str, int]
"""The model's identity, the device and dtype of its parameters, and the sum of their
version counters."""


def weights_key(model: PreTrainedModel) -> WeightsKey:
    """What changes whenever the weights that computed a cache change."""
    parameters = list(model.parameters())
    first = parameters[0]
    version = sum(p._version for p in parameters)
    return id(model), str(first.device), str(first.dtype), version


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` share from their start."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class PrefixCache:
    """One slot: the last generation's keys and values and the tokens they are of."""

    ids: list[int] = field(default_factory=list)
    """The tokens whose keys and values ``cache`` holds, in order."""
    cache: DynamicCache | None = None
    weights: WeightsKey | None = None
    reused_tokens: int = 0
    """Prefill tokens the cache saved, over every generation."""
    _busy: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def claimed(self) -> Iterator[PrefixCache | None]:
        """This cache for one generation, or None while another generation uses it."""
        if not self._busy.acquire(blocking=False):
            yield None
            return
        try:
            yield self
        finally:
            self._busy.release()

    def for_context(self, model: PreTrainedModel, context: Sequence[int]) -> DynamicCache:
        """The cache holding the longest part of ``context`` (its last token excluded: the
        generation needs one new input) that the last generation computed with these
        weights; a fresh cache when there is none."""
        weights = weights_key(model)
        keep = 0
        if self.cache is not None and weights == self.weights:
            keep = common_prefix(self.ids, context[:-1])
        cache = self.cache
        if cache is not None and keep > 0:
            surplus = cache.get_seq_length() - keep
            if surplus > 0:
                cache.crop(-surplus)
            if cache.get_seq_length() != keep:  # a layer that cannot crop (sliding window)
                cache, keep = None, 0
        else:
            cache, keep = None, 0
        if cache is None:
            cache = DynamicCache(config=model.config)
        self.cache, self.weights, self.ids = cache, weights, list(context[:keep])
        self.reused_tokens += keep
        return cache

    def keep(self, sequence: Sequence[int]) -> None:
        """Record that the cache now holds the keys and values of ``sequence``'s start
        (the generation's context and every token it fed back)."""
        held = self.cache.get_seq_length() if self.cache is not None else 0
        self.ids = list(sequence[:held])
