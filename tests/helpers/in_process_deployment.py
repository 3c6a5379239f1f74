"""The fake deployment (``fake_deployment.FakeDeployment``) as ``certify_deployment``'s engine and
``self`` reference in process: no HTTP, so a test can run many looks, or interrupt the main thread
(Ctrl-C) at a chosen sampling call."""

from __future__ import annotations

import numpy as np


class Engine:
    """The fake server's sampling; interrupts the main thread at call ``stop_at`` (None: never).

    Args:
        stop_at: the sampling call that raises KeyboardInterrupt in the main thread, or None.
        defect: the server's planted defect (``fake_deployment.DEFECTS``), or None.
        delay_s: seconds each call takes at least (a server's time per request).
    """

    def __init__(self, stop_at: int | None = None, defect: str | None = None, delay_s: float = 0.0):
        from helpers.fake_deployment import FakeDeployment

        self.server, self.calls, self.stop_at = FakeDeployment(defect=defect), 0, stop_at
        self.seeds: list = []  # the seed of each sampling call, in call order
        self.delay_s = delay_s

    def sample(self, prompt, n, seed):
        import _thread

        from spectr_gbv.certify.endpoint.servers import Sample

        import time

        self.calls += 1
        self.seeds.append(seed)
        time.sleep(self.delay_s)
        if self.calls == self.stop_at:
            _thread.interrupt_main()
        toks = self.server.sample(list(prompt), n, seed, 1.0)
        rows = self.server.logprob_rows(prompt, toks)
        return Sample(toks, [float(rows[t, x]) for t, x in enumerate(toks)])


class Reference:
    """The fake server's top-20 echo (what reference ``self`` gets); ``server``: its ``FakeDeployment``."""

    remote = True

    def __init__(self, server):
        self.server = server

    def rows(self, prompt, tokens, texts=None):
        from spectr_gbv.certify.endpoint.references import ReferenceRows
        from spectr_gbv.certify.endpoint.servers import TopLaws

        rows = self.server.logprob_rows(prompt, tokens)
        ids = np.lexsort((np.broadcast_to(np.arange(rows.shape[1]), rows.shape), -rows), axis=1)[:, :20]
        own = [float(rows[t, x]) for t, x in enumerate(tokens)]
        top = TopLaws([list(map(int, r)) for r in ids],
                      [list(map(float, r)) for r in np.take_along_axis(rows, ids, 1)], own)
        return ReferenceRows(top=top, raw=own)
