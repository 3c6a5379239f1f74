"""KV-cache handling for speculative decoding on transformers 5.24 ``DynamicCache``.

An iteration widens a batch-1 cache to K rows (one per draft), extends every row with that
draft's tokens, and afterwards keeps one row cut back to the accepted prefix.  transformers
provides each step (``batch_repeat_interleave``, ``batch_select_indices``, ``crop`` with a
negative count); this module only fixes the conventions (lengths in tokens, one row kept)
so that the engine never reaches into the layers' tensors.
"""

from __future__ import annotations

import torch


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
