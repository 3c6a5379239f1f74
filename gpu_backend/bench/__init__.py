"""The engine benchmark: settings (``config``), runs (``run``), transformers' assisted generation
counted by the same definitions (``assisted``), generate's default decided per call
(``generate_default``), tables and plots (``render``)."""
