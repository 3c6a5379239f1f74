"""certify/endpoint/client.py: URLs, remote hosts, retries, the API key, errors that name their cause."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spectr_gbv.certify.endpoint.client import (Endpoint, EndpointError, EndpointUnreachable,
                                                              is_loopback, parse_base_url)


class Script:
    """A loopback server answering each request with the next (status, body) of a script."""

    def __init__(self, answers):
        self.answers, self.calls, self.headers = list(answers), 0, []

    def __enter__(self):
        state = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self):
                state.headers.append(dict(self.headers))
                status, body, *extra = state.answers[min(state.calls, len(state.answers) - 1)]
                state.calls += 1
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (extra[0] if extra else {}).items():
                    self.send_header(k, v)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer()

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        return self

    def __exit__(self, *a):
        self.server.shutdown()
        self.server.server_close()


def test_urls():
    assert parse_base_url("http://127.0.0.1:8000/") == ("http://127.0.0.1:8000", [])
    root, notes = parse_base_url("http://localhost:8000/v1")
    assert root == "http://localhost:8000" and "OpenAI base URL" in notes[0]
    for bad in ("ftp://127.0.0.1", "127.0.0.1:8000", "http://127.0.0.1:8000/?x=1"):
        with pytest.raises(ValueError, match="URL"):
            parse_base_url(bad)
    assert is_loopback("127.0.0.5") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.0.0.1") and not is_loopback("example.com")
    with pytest.raises(ValueError, match="user or password"):
        parse_base_url("http://user:pw@127.0.0.1:8000")


def test_a_remote_host_is_allowed_by_default(monkeypatch):
    """No flag for a server on another machine (no request is sent: only the object is built)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert Endpoint("http://192.0.2.7:8000").host == "192.0.2.7"
    assert Endpoint("https://gpu-node.example:8443/v1").root == "https://gpu-node.example:8443"


def test_an_api_key_is_never_sent_in_clear_text_off_this_machine(monkeypatch):
    """A key with an http:// URL to a non-loopback host is refused (one line naming https and
    --insecure, never the key); https, loopback, or --insecure are accepted (no request sent)."""
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    with pytest.raises(ValueError, match=r"clear text over http to 192\.0\.2\.7.*https.*--insecure") as err:
        Endpoint("http://192.0.2.7:8000", api_key_env="MY_KEY")
    assert "sk-secret" not in str(err.value)
    assert Endpoint("https://192.0.2.7:8000", api_key_env="MY_KEY").host == "192.0.2.7"
    assert Endpoint("http://127.0.0.1:8000", api_key_env="MY_KEY").host == "127.0.0.1"
    ep = Endpoint("http://192.0.2.7:8000", api_key_env="MY_KEY", insecure=True)
    assert any("--insecure" in n for n in ep.notes) and "sk-secret" not in " ".join(ep.notes) + repr(ep)


def test_retries_on_5xx_429_and_malformed_json_then_succeeds():
    with Script([(500, {"error": {"message": "busy"}}), (429, {}), (200, b"{not json"), (200, {"ok": 1})]) as s:
        ep = Endpoint(s.url, retries=3, backoff_s=0.0)
        assert ep.post("/x", {}) == {"ok": 1}
    assert s.calls == 4 and ep.counts["retries"] == 3
    assert (ep.counts["HTTP 500"], ep.counts["HTTP 429"], ep.counts["malformed JSON"]) == (1, 1, 1)


def test_retries_exhausted_and_4xx_are_one_line_errors():
    with Script([(503, {"detail": "overloaded"})]) as s:
        with pytest.raises(EndpointError, match=r"HTTP 503: overloaded \(after 3 tries\)"):
            Endpoint(s.url, retries=2, backoff_s=0.0).post("/x", {})
    assert s.calls == 3
    with Script([(400, {"error": {"message": "token id out of range"}})]) as s:
        with pytest.raises(EndpointError, match="HTTP 400: token id out of range") as err:
            Endpoint(s.url, retries=5, backoff_s=0.0).post("/x", {})
    assert s.calls == 1 and err.value.status == 400  # a refusal is not retried


def test_the_api_key_is_sent_and_never_shown(monkeypatch):
    """HTTP 401 says the server refused the key and names --api-key-env (not a missing model), is
    not retried, and never shows the key."""
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    with Script([(401, {"error": {"message": "bad key"}})]) as s:
        ep = Endpoint(s.url, api_key_env="MY_KEY", retries=3)
        with pytest.raises(EndpointError, match=r"HTTP 401: the server refused the API key in \$MY_KEY \(bad key\): "
                           "check the key.*--api-key-env") as err:
            ep.post("/x", {})
    assert s.calls == 1 and err.value.status == 401
    assert s.headers[0]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in str(err.value) and "sk-secret" not in repr(ep)
    monkeypatch.delenv("MY_KEY")
    with Script([(200, {})]) as s:
        Endpoint(s.url, api_key_env="MY_KEY").post("/x", {})
    assert "Authorization" not in s.headers[0]
    with Script([(403, {"detail": "forbidden"})]) as s:
        with pytest.raises(EndpointError, match=r"HTTP 403: the server asks for an API key and none was sent "
                           r"\(\$MY_KEY is not set; forbidden\): export the key in \$MY_KEY"):
            Endpoint(s.url, api_key_env="MY_KEY").probe("/v1/models")


def test_an_unreachable_server_is_told_within_seconds():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    start = time.perf_counter()
    with pytest.raises(EndpointUnreachable, match="cannot be reached"):
        Endpoint(f"http://127.0.0.1:{port}").probe("/v1/models")
    assert time.perf_counter() - start < 5


def test_the_request_budget_is_enforced():
    with Script([(200, {})]) as s:
        ep = Endpoint(s.url, max_requests=2)
        ep.post("/x", {})
        ep.get("/y")
        with pytest.raises(EndpointError, match="request budget"):
            ep.post("/x", {})
    assert s.calls == 2


def test_an_html_page_is_named_as_such_not_retried():
    """A URL that serves a web page (a dashboard, a proxy's login): the probe and a call say the
    server answered text/html, not JSON, and ask whether the URL is the API's base."""
    page = (200, b"<!DOCTYPE html><html><body>Login</body></html>", {"Content-Type": "text/html; charset=utf-8"})
    with Script([page]) as s:
        ep = Endpoint(s.url, retries=3, backoff_s=0.0)
        with pytest.raises(EndpointError, match=r"answered text/html, not JSON .*is http://127\.0\.0\.1:\d+ the API's base"):
            ep.probe("/v1/models")
        with pytest.raises(EndpointError, match="answered text/html, not JSON"):
            ep.post("/v1/completions", {})
    assert s.calls == 2  # no retry of a web page


def test_a_redirect_is_not_followed():
    with Script([(302, b"", {"Location": "http://198.51.100.9/elsewhere"})]) as s:
        with pytest.raises(EndpointError, match=r"redirects to http://198\.51\.100\.9/elsewhere; give that URL"):
            Endpoint(s.url).post("/x", {})
    assert s.calls == 1


def test_a_probe_remembers_the_status_of_a_missing_path():
    with Script([(404, {"detail": "Not Found"})]) as s:
        ep = Endpoint(s.url)
        assert ep.probe("/v1/models") is None
    assert ep.probe_status == {"/v1/models": 404}
