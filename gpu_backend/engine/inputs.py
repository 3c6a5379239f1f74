"""What the engine and plain sampling check of their inputs, the error they raise on a non-finite
row, and the run's seeded generator."""

from __future__ import annotations

import numbers

import torch

from spectr_gbv.reference.seeds import generator_seed


def check_positive(value, name: str) -> int:
    """``value`` (any integer type, numpy's too; not bool) as an int ≥ 1, else ValueError naming
    ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


class NonFiniteError(ValueError):
    """A model produced a non-finite probability row (NaN or inf logits) on the engine path;
    the message names the model (draft or target) and the position.  Nothing drawn from or
    after that row was emitted."""


def seeded_generator(seed, device) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``generator_seed(seed)``."""
    return torch.Generator(device=device).manual_seed(generator_seed(seed))


def prompt_tensor(prompt_ids, V: int) -> torch.Tensor:
    """``prompt_ids`` (a sequence or tensor of integer token ids) as int64 [T], checked.

    Raises:
        ValueError: empty, not integers (floats are not silently truncated), or an id outside
            [0, V) (an embedding lookup out of range is an IndexError on CPU and a device-side
            assert on CUDA), naming ``prompt_ids``.
    """
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.is_floating_point() or prompt_ids.is_complex() or prompt_ids.dtype == torch.bool:
            raise ValueError(f"prompt_ids must be integer token ids, got a {prompt_ids.dtype} tensor")
        ids = prompt_ids.to(torch.int64).reshape(-1)
    else:
        flat = list(prompt_ids)
        if any(isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in flat):
            bad = next(t for t in flat if isinstance(t, bool) or not isinstance(t, numbers.Integral))
            raise ValueError(f"prompt_ids must be integer token ids, got {bad!r}")
        if any(not 0 <= int(t) < V for t in flat):
            bad = next(int(t) for t in flat if not 0 <= int(t) < V)
            raise ValueError(f"prompt_ids: token id {bad} outside [0, {V})")
        ids = torch.tensor([int(t) for t in flat], dtype=torch.int64)
    if ids.numel() == 0:
        raise ValueError("prompt_ids must hold at least one token")
    if bool((ids < 0).any()) or bool((ids >= V).any()):
        bad = int(ids[(ids < 0) | (ids >= V)][0])
        raise ValueError(f"prompt_ids: token id {bad} outside [0, {V})")
    return ids
