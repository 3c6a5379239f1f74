"""Base class of the batched verifiers: validation + noise, then the rule's ``decide``."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from spectr_gbv.reference.contract import BatchVerdict

from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch, as_tensor, prepare
from spectr_gbv.gpu_backend.verifiers.noise import Noise, make_noise


# The torch classes of the rules and of their planted defects, filled as the classes are defined
# (``Verifier.__init_subclass__``): the rule registry (reference/rules/registry.py) names none.
#: {numpy Rule class: the torch Verifier that ports it} (the first class defined for a rule)
VERIFIER_CLASSES: dict[type, type] = {}
#: {planted defect name (``registry.Planted.name``): its torch Verifier class}
PLANTED_CLASSES: dict[str, type] = {}


class _FromReference:
    """A flag of the verifier read from the numpy rule it ports (declared there once): on the
    class, the Rule class's; on an instance, its ``reference_rule``'s (built with the
    verifier's parameters, e.g. ``modifies_targets`` follows ``algorithm2``)."""

    def __set_name__(self, owner, attr):
        self.attr = attr

    def __get__(self, obj, cls=None):
        if obj is None:
            return getattr(cls.reference, self.attr)
        return getattr(obj.reference_rule, self.attr)


class Verifier(ABC):
    """A batched rule with the contract of gpu_backend.verifiers (module doc).

    Subclasses set ``reference`` (the numpy ``Rule`` class they port: ``name``,
    ``single_draft`` and ``modifies_targets`` are read from it, declared there once), take the
    rule's parameters in ``__init__`` and return the matching numpy rule from
    ``make_reference`` (default: ``reference()``), and implement ``decide``,
    which must not synchronise with the host (no .item(), .tolist(), nonzero(), shape-changing
    boolean indexing or Python branching on tensor values) and may loop in Python only over
    the static sizes K and L (and over chunks whose count follows from the shapes).  Checked by
    running every rule on the meta device (tests/gpu_backend/verifiers/test_verifiers_layout.py).
    A planted wrong rule (certify/planted.py) overrides ``name`` only.

    Defining a subclass registers it: one that sets ``reference`` in its own body becomes the
    torch verifier of the rules whose reference rule is that class (``VERIFIER_CLASSES``;
    unless one is registered already: a later subclass porting the same rule differently does
    not replace it); one that sets ``planted_as`` (a ``registry.Planted`` name) becomes that
    planted defect's class (``PLANTED_CLASSES``).

    Raises (at class definition):
        ValueError: ``planted_as`` already names another class.
    """

    reference: type  # the numpy Rule class this verifier ports
    planted_as: str | None = None  # a planted defect's name (certify/planted.py)
    name = _FromReference()
    single_draft = _FromReference()
    modifies_targets = _FromReference()
    # where numpy inputs are placed (tensors are used where they are): see ``on``
    input_device = None
    input_dtype = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "reference" in cls.__dict__:
            VERIFIER_CLASSES.setdefault(cls.reference, cls)
        planted = cls.__dict__.get("planted_as")
        if planted is not None:
            if PLANTED_CLASSES.get(planted, cls) is not cls:
                raise ValueError(f"planted defect {planted!r} already has the class "
                                 f"{PLANTED_CLASSES[planted].__qualname__}")
            PLANTED_CLASSES[planted] = cls

    def on(self, device=None, dtype=None) -> "Verifier":
        """Place numpy inputs on ``device`` (default CPU) and cast their probability rows to
        ``dtype`` (float64, float32 or bfloat16; default: the arrays' own dtype).  Tensor
        inputs are used as given.  Returns ``self``, e.g. ``get_verifier("bv").on("cuda",
        torch.bfloat16)`` to certify the bfloat16 path from numpy rows (oracle.certify).
        """
        self.input_device = device
        self.input_dtype = dtype
        return self

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None,
                 validate: bool = True) -> BatchVerdict:
        """Verify B iterations at once.

        Args:
            draft_tokens: int [B, K, L] (a tensor, or a numpy array: see ``on``).
            draft_probs: float64/float32/bfloat16 [B, K, L, V], p(· | c, X^(k)_<i).
            target_probs: same dtype [B, K, L+1, V], q(· | c, X^(k)_<i); row L = bonus row.
            seeds: int64 [B], per-row seeds (row b's randomness depends on seeds[b] alone).
            noise: (uniforms float64 [B, K, L+1] in (0, 1], exponentials float64 [B, V] > 0),
                explicit noise with the conventions of reference.randomness.MatchedSource.
            validate: value checks of the inputs (synchronise); False for the engine's hot path.
                Unvalidated malformed probabilities still give τ ∈ [0, L] and token ids in
                [0, V) (then -1), but the Algorithm 2 joints are NaN where the inputs hold NaN
                or negative probabilities.  Draft token ids outside [0, V) are not covered: the
                row gathers index with them (torch.gather's RuntimeError "index … out of
                bounds" on CPU, a device-side assert on CUDA); the shape checks run either
                way, the id range only with validation.
        Returns:
            BatchVerdict on the inputs' device.
        Raises:
            ValueError: malformed inputs, naming the argument (batch.check_shapes,
                batch.check_values, noise.make_noise); K ≠ 1 for a single-draft rule.
        """
        with torch.no_grad():  # inputs that require grad would break the rules' in-place steps
            return self._call(draft_tokens, draft_probs, target_probs, seeds, noise, validate)

    def _call(self, draft_tokens, draft_probs, target_probs, seeds, noise, validate) -> BatchVerdict:
        dev, dt = self.input_device, self.input_dtype
        draft_tokens = as_tensor(draft_tokens, "draft_tokens", dev)
        draft_probs = as_tensor(draft_probs, "draft_probs", dev, dt)
        target_probs = as_tensor(target_probs, "target_probs", dev, dt)
        batch = prepare(draft_tokens, draft_probs, target_probs, validate=validate,
                        single_draft=self.single_draft, rule_name=self.name)
        nz = make_noise(batch.B, batch.K, batch.L, batch.V, batch.device, batch.dtype,
                        seeds=seeds, noise=noise, validate=validate)
        return self.decide(batch, nz)

    def make_reference(self):
        """The numpy reference rule with this verifier's parameters (override with parameters)."""
        return self.reference()

    @property
    def reference_rule(self):
        """``make_reference()``, built once per verifier."""
        rule = self.__dict__.get("_reference_rule")
        if rule is None:
            rule = self.__dict__["_reference_rule"] = self.make_reference()
        return rule

    @abstractmethod
    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        """The rule on prepared inputs and noise."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
