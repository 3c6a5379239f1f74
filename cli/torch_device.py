"""The torch sub-commands' ``--threads`` and ``--device``, checked before anything slow runs
(``certify verifiers``, ``certify our-engine``)."""

from __future__ import annotations


def set_threads(threads: int) -> None:
    """OMP_NUM_THREADS and torch's intra-op threads to ``threads`` (≥ 1; the parser checks it)."""
    import os

    import torch

    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)


def torch_device(name: str):
    """``torch.device(name)`` when it can run the verifiers and hold a tensor.

    Raises:
        cli.args.UsageError: ``--device NAME is not usable: why`` (an unknown name, a type other
            than cpu/cuda/mps, a CUDA index that does not exist, a backend torch reports absent).
    """
    import torch

    from spectr_gbv.certify.verifiers.run import device_unusable
    from spectr_gbv.cli.args import UsageError, first_line

    try:
        device = torch.device(name)
    except (RuntimeError, AssertionError, ValueError) as err:
        raise UsageError(f"--device {name!r} is not usable: {first_line(err)}") from None
    why = device_unusable(device, torch)
    if why is None:
        try:
            torch.empty(0, device=device)
        except (RuntimeError, AssertionError, ValueError) as err:
            why = first_line(err)
    if why is not None:
        raise UsageError(f"--device {name!r} is not usable: {why}")
    return device
