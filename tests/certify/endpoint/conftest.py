"""Every request of these tests stays on this machine: the certifier's HTTP opener is wrapped so
that a request to a host other than loopback fails the test before anything is sent (remote
hosts are allowed by the certifier; the tests reach them only through stubs)."""

from __future__ import annotations

import urllib.parse

import pytest


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    from spectr_gbv.certify.endpoint import client

    real_open = client._OPENER.open

    def guarded(req, *args, **kwargs):
        url = req.full_url if hasattr(req, "full_url") else str(req)
        host = urllib.parse.urlparse(url).hostname or ""
        if not client.is_loopback(host):
            pytest.fail(f"a test sent a request to {host}: tests reach only loopback servers")
        return real_open(req, *args, **kwargs)

    monkeypatch.setattr(client._OPENER, "open", guarded)
