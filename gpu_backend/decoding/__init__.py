"""What the engine and every model backend share, torch-free at import: the seam a backend implements
(``backend``: ``Backend``, ``Layout``, ``DraftState``), the probability processing of every row
(``sampling``), the temperature floor (``temperature``) and the draft token tree (``tree``)."""
