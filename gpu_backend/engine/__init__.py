"""The speculative-decoding engine on real models: the loop (``speculative``), plain sampling
(``plain``), a generation's metrics (``result``), input checks (``inputs``), Algorithm 2's stack on
tensors (``stack``), memory checks (``memory``), the default rule and shape (``defaults``).  It runs
on the backend it is handed (``decoding.backend.Backend``; default ``torch_backend``)."""
