"""The HTTP client of the deployment certifier: one server, JSON over HTTP, bounded and retried.

Standard library only (``urllib``), safe to share between threads (each call opens its own
connection).  What it guarantees:

- **the URL**: ``http(s)://host[:port][/prefix]``; a URL ending in ``/v1`` (an OpenAI *base* URL)
  is taken as the server's root with a note (``Endpoint.notes``), since the dialects name their
  paths from the root (``/v1/completions``, ``/generate``, ``/completion``);
- **loopback unless allowed**: a host other than 127.0.0.0/8, ``localhost`` or ``::1`` is refused
  unless ``allow_remote`` (the project's tests and examples only ever reach loopback);
- **the API key**: read from the environment variable ``api_key_env`` (default
  ``OPENAI_API_KEY``) and sent as ``Authorization: Bearer …``; never printed, logged, stored or
  put in an error message (``Endpoint.__repr__`` hides it);
- **bounded**: ``timeout_s`` per request, ``max_requests`` in all (then ``EndpointError``);
- **retries**: on HTTP 429 and 5xx, on timeouts and refused or reset connections, and on a
  2xx body that is not JSON, up to ``retries`` more tries per request, sleeping
  ``backoff_s · 2^i`` (at most ``MAX_BACKOFF_S``; a 429's ``Retry-After`` when it says longer);
  every retry is counted (``Endpoint.counts``);
- **errors**: ``EndpointUnreachable`` when the server cannot be reached at all (the first
  request, ``probe``), ``EndpointError`` for everything else (a 4xx with the server's own
  message, retries exhausted, a body that is not JSON): one line each, never a traceback.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter

MAX_BACKOFF_S = 30.0


class EndpointError(RuntimeError):
    """A request the server did not answer as the protocol says (one line); ``status``: the HTTP
    status of a refused request (4xx), else None."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class EndpointUnreachable(EndpointError):
    """The server cannot be reached (refused, unknown host, timed out)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost`` or an address in 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_base_url(url: str) -> tuple[str, list[str]]:
    """``(root URL without a trailing slash, notes)`` of a server URL (module doc).

    Raises:
        ValueError: not an http(s) URL with a host.
    """
    if not isinstance(url, str):
        raise ValueError(f"URL must be a string, got {url!r}")
    parsed = urllib.parse.urlparse(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"URL must look like http://HOST:PORT, got {url!r}")
    if parsed.query or parsed.fragment:
        raise ValueError(f"URL must not carry a query or fragment, got {url!r}")
    path = parsed.path.rstrip("/")
    notes = []
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
        notes.append(f"{url} is an OpenAI base URL; using the server's root "
                     f"{parsed.scheme}://{parsed.netloc}{path} (paths such as /v1/completions are added)")
    return f"{parsed.scheme}://{parsed.netloc}{path}", notes


class Endpoint:
    """One server (module doc).

    Args:
        url: the server's URL (``parse_base_url``).
        api_key_env: the environment variable holding the API key (absent or empty: no key).
        timeout_s: seconds per request (> 0).
        retries: further tries per request on a retryable failure (≥ 0).
        backoff_s: the first retry's sleep (≥ 0).
        max_requests: requests in all, retries included (≥ 1).
        allow_remote: permit a host that is not loopback.
    Attributes:
        root: the root URL; host: its host; notes: lines about the URL for the report;
        counts: ``Counter`` of requests, retries and failures by kind.
    Raises:
        ValueError: a bad URL, a non-loopback host without ``allow_remote``, bad numbers.
    """

    def __init__(self, url: str, *, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0,
                 retries: int = 4, backoff_s: float = 1.0, max_requests: int = 1_000_000,
                 allow_remote: bool = False):
        self.root, self.notes = parse_base_url(url)
        self.host = urllib.parse.urlparse(self.root).hostname
        if not allow_remote and not is_loopback(self.host):
            raise ValueError(f"{self.host!r} is not a loopback address (allow it with --allow-remote)")
        if not (timeout_s > 0 and retries >= 0 and backoff_s >= 0 and max_requests >= 1):
            raise ValueError("timeout_s must be > 0, retries ≥ 0, backoff_s ≥ 0 and max_requests ≥ 1")
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.max_requests = int(max_requests)
        self._key = os.environ.get(api_key_env) or None
        self.api_key_env = api_key_env
        self.counts: Counter = Counter()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        key = f"${self.api_key_env} set" if self._key else "no API key"
        return f"Endpoint({self.root!r}, {key})"

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def _take_request(self) -> None:
        with self._lock:
            if self.counts["requests"] >= self.max_requests:
                raise EndpointError(f"{self.root}: the request budget ({self.max_requests}) is spent")
            self.counts["requests"] += 1

    def post(self, path: str, body: dict, timeout_s: float | None = None) -> dict:
        """POST ``body`` as JSON to ``root + path``; the decoded JSON answer (module doc)."""
        return self._call("POST", path, json.dumps(body).encode(), timeout_s)

    def get(self, path: str, timeout_s: float | None = None) -> dict:
        """GET ``root + path``; the decoded JSON answer."""
        return self._call("GET", path, None, timeout_s)

    def probe(self, path: str, timeout_s: float = 5.0) -> dict | None:
        """One GET of ``path`` without retries, to learn whether the server is there.

        Returns:
            the JSON answer, or None when the server answered with an HTTP error status (it is
            there, but not at this path).
        Raises:
            EndpointUnreachable: refused, unknown host, or no answer within ``timeout_s``.
        """
        self._take_request()
        req = urllib.request.Request(self.root + path, headers=self._headers(), method="GET")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError:
            return None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise EndpointUnreachable(f"{self.root} cannot be reached: {_one_line(reason)}") from None
        try:
            return json.loads(raw)
        except ValueError:
            return {}

    def _call(self, method: str, path: str, data: bytes | None, timeout_s: float | None) -> dict:
        url = self.root + path
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._count("retries")
            self._take_request()
            req = urllib.request.Request(url, data=data, headers=self._headers(), method=method)
            wait = None
            try:
                with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw)
                except ValueError:
                    self._count("malformed JSON")
                    last = f"the answer is not JSON ({_one_line(raw[:120].decode('utf-8', 'replace'))!r})"
            except urllib.error.HTTPError as err:
                detail = _error_message(err)
                if err.code == 429 or err.code >= 500:
                    self._count(f"HTTP {err.code}")
                    last = f"HTTP {err.code}: {detail}"
                    wait = _retry_after(err)
                else:
                    self._count(f"HTTP {err.code}")
                    raise EndpointError(f"{method} {path}: HTTP {err.code}: {detail}", err.code) from None
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as err:
                self._count("connection")
                last = f"no answer ({_one_line(getattr(err, 'reason', err))})"
            if attempt < self.retries:
                sleep = min(MAX_BACKOFF_S, self.backoff_s * 2 ** attempt)
                time.sleep(max(sleep, wait or 0.0))
        raise EndpointError(f"{method} {path}: {last} (after {self.retries + 1} tries)")


def _one_line(x) -> str:
    return " ".join(str(x).split())[:300]


def _error_message(err: urllib.error.HTTPError) -> str:
    """The server's own message of an HTTP error (OpenAI's ``{"error": {"message": …}}``, FastAPI's
    ``{"detail": …}``, TGI's ``{"error": …}``), on one line."""
    try:
        body = err.read()
    except OSError:
        body = b""
    try:
        data = json.loads(body)
    except ValueError:
        return _one_line(body.decode("utf-8", "replace")) or err.reason
    if isinstance(data, dict):
        inner = data.get("error", data.get("detail", data.get("message", data)))
        if isinstance(inner, dict):
            inner = inner.get("message", inner)
        return _one_line(inner)
    return _one_line(data)


def _retry_after(err: urllib.error.HTTPError) -> float | None:
    try:
        return min(MAX_BACKOFF_S, float(err.headers.get("Retry-After", "")))
    except (TypeError, ValueError):
        return None
