"""KV-cache handling for speculative decoding on transformers 5.24 ``DynamicCache``.

An iteration widens a batch-1 cache to K rows (one per draft), extends every row with that
draft's tokens, and afterwards keeps one row cut back to the accepted prefix.  transformers
provides each step (``batch_repeat_interleave``, ``batch_select_indices``, ``crop`` with a
negative count); this module only fixes the conventions (lengths in tokens, one row kept)
so that the engine never reaches into the layers' tensors.

Only caches that can be cut back exactly are usable (``rollback_problem``): every layer a plain
``DynamicLayer`` (full attention), or a sliding-window layer whose window can never bind.  A
binding window drops positions that a cut-back would need (transformers raises "crop was
called ..." at the first crop) and the packed layout's tree mask ignores it; a recurrent or
convolution state (Mamba, LFM2, hybrid layers) cannot be rewound, nor fed a token tree.
"""

from __future__ import annotations

import torch


def rollback_problem(config, stateful: bool = False) -> str | None:
    """Why the engine could not cut back a cache built for ``config``, or None when it can.

    Decided from the cache transformers itself builds (``DynamicCache(config=config)``, whose
    layer types come from ``config.layer_types`` or, without them, ``sliding_window`` /
    ``attention_chunk_size``): e.g. Qwen2 configs carry ``sliding_window`` with
    ``use_sliding_window=False``, and transformers builds full layers for them.

    Args:
        config: a transformers model config (the text config is used for multimodal ones).
        stateful: the model class's ``_is_stateful`` (recurrent models such as Mamba, RWKV,
            Jamba: transformers refuses assisted generation for them too).
    Returns:
        None, or a short reason (no trailing period) naming the first offending layer.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import (DynamicLayer, DynamicSlidingWindowLayer,
                                          LinearAttentionCacheLayerMixin)

    if stateful:
        return "it is a stateful (recurrent) model, whose state cannot be cut back"
    try:
        cache = DynamicCache(config=config)  # what new_cache builds
    except Exception as err:  # noqa: BLE001 - any failure means: not a cache we can handle
        return f"transformers cannot build a DynamicCache for its config ({err})"
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    limit = getattr(text, "max_position_embeddings", None)
    for i, layer in enumerate(cache.layers):
        name = type(layer).__name__
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            return (f"layer {i} keeps a recurrent / convolution state ({name}: linear-attention, "
                    f"conv or hybrid layer), which cannot be cut back")
        if isinstance(layer, DynamicSlidingWindowLayer):
            window = int(layer.sliding_window)
            if limit is None or window < int(limit):
                return (f"layer {i} uses sliding window attention (window {window} < "
                        f"max_position_embeddings {limit}): the window drops positions a "
                        f"cut-back needs and the packed layout's tree mask ignores it")
            continue  # the window never binds: the layer behaves as a full one
        if type(layer) is not DynamicLayer:
            return f"layer {i} has a {name} cache, which the engine cannot cut back"
    return None


def sliding_window_limit(config) -> int | None:
    """The smallest sliding window of the cache transformers builds for ``config`` (None when
    it has no sliding layer).  ``rollback_problem`` accepts only windows of at least
    ``max_position_embeddings``; a longer generation must still fit in it (the engine checks
    it per generation: the layer keeps only its last window − 1 positions)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicSlidingWindowLayer

    windows = [int(layer.sliding_window) for layer in DynamicCache(config=config).layers
               if isinstance(layer, DynamicSlidingWindowLayer)]
    return min(windows) if windows else None


def new_cache(model):
    """An empty ``DynamicCache`` for ``model`` (its config decides the layer types)."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def cache_length(cache) -> int:
    """Number of positions held (the same in every row and layer)."""
    return int(cache.get_seq_length())


def widen(cache, rows: int) -> None:
    """Repeat a batch-1 cache ``rows`` times along the batch axis (in place; no-op for 1)."""
    if rows > 1:
        cache.batch_repeat_interleave(rows)


def keep_row(cache, row: int, rows: int, length: int) -> None:
    """Keep row ``row`` of a ``rows``-row cache and its first ``length`` positions (in place).

    Args:
        cache: a DynamicCache with ``rows`` rows.
        row: the row to keep, 0 ≤ row < rows.
        rows: current batch size of the cache.
        length: positions to keep, 0 ≤ length ≤ cache_length(cache).
    Raises:
        ValueError: row or length out of range.
    """
    if not 0 <= row < rows:
        raise ValueError(f"row={row} must be in [0, {rows})")
    held = cache_length(cache)
    if not 0 <= length <= held:
        raise ValueError(f"length={length} must be in [0, {held}]")
    if rows > 1:
        # a one-element index tensor keeps the batch axis (a plain int would drop it)
        cache.batch_select_indices(torch.tensor([row]))
    if length < held:
        cache.crop(length - held)


def keep_positions(cache, positions: list[int]) -> None:
    """Keep only the given positions of a batch-1 cache, in the given order (in place).

    A leading run 0..m−1 is a crop (no copy); otherwise every layer's keys and values are
    gathered along the sequence axis.  Used by the packed tree layout (``gpu_backend.decoding.tree``),
    whose kept path is the context plus scattered node positions.

    Args:
        cache: a DynamicCache whose layers hold ``keys``/``values`` [1, heads, length, dim].
        positions: increasing positions, each < cache_length(cache).
    Raises:
        ValueError: a position out of range or not increasing.
        TypeError: a layer without ``keys``/``values`` tensors (not a dynamic layer).
    """
    held = cache_length(cache)
    if any(b <= a for a, b in zip(positions, positions[1:])) or (
            positions and not 0 <= positions[0] <= positions[-1] < held):
        raise ValueError(f"positions must increase within [0, {held}), got {positions}")
    n = len(positions)
    if positions == list(range(n)):
        if n < held:
            cache.crop(n - held)
        return
    # the common prefix is kept as a view; only the scattered tail is gathered
    head = 0
    while head < n and positions[head] == head:
        head += 1
    tail = torch.tensor(positions[head:], dtype=torch.int64)
    for layer in cache.layers:
        if hasattr(layer, "cumulative_length"):  # a sliding layer whose window never binds
            layer.cumulative_length = n
        if not isinstance(getattr(layer, "keys", None), torch.Tensor):
            raise TypeError(f"cannot gather positions of a {type(layer).__name__} cache layer")
        tail_dev = tail.to(layer.keys.device)
        layer.keys = torch.cat([layer.keys[..., :head, :],
                                layer.keys.index_select(-2, tail_dev)], dim=-2)
        layer.values = torch.cat([layer.values[..., :head, :],
                                  layer.values.index_select(-2, tail_dev)], dim=-2)
