"""spectr-gbv: exact reference, oracles and certified verifiers for speculative decoding.

The project's folders stay at the top of the repository and install under this one import
name, so that installing it claims no generic top-level name:

- ``spectr_gbv.reference``    (reference/)     exact numpy rules and laws by enumeration;
- ``spectr_gbv.oracle``       (oracle/)        bounds, transport programs, statistical tests,
  the certification harness and the pytest plugin;
- ``spectr_gbv.proofs_check`` (proofs_check/)  every claim as a numerical check with a verdict;
- ``spectr_gbv.gpu_backend``  (gpu_backend/)   batched torch verifiers, adapters, the engine on
  real models, its tuning and benchmark;
- ``spectr_gbv.certify``      (certify/)       one folder per ``spectr-gbv certify`` sub-command
  (verifiers, samplers, engine, our_engine, endpoint: the last imports no torch);
- ``spectr_gbv.cli``          (cli/)           the ``spectr-gbv`` command (parsing and printing).
"""

__version__ = "0.1.0"

# In a source checkout (the folders beside this one), the subpackages are found there, so the
# checkout's own code is imported even where another checkout is installed in editable mode.
# An installed wheel has no pyproject.toml beside its folder and is left as installed.
import os as _os

_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if (_os.path.isfile(_os.path.join(_ROOT, "pyproject.toml"))
        and _os.path.isfile(_os.path.join(_ROOT, "reference", "contract.py"))):
    __path__.append(_ROOT)  # noqa: F821  (a package's __path__)
del _os
