"""What the engine and every model backend share: the seam a backend implements (``backend``:
``Backend``, ``Layout``, ``DraftState``), the probability processing of every row (``sampling``), the
temperature floor (``temperature``, torch-free: the command line checks with it before torch loads)
and the draft token tree (``tree``)."""
