"""The HTTP client of the deployment certifier: one server, JSON over HTTP, bounded, paced and
retried.

Standard library only (``urllib``), safe to share between threads (each call opens its own
connection).  What it guarantees:

- **the URL**: ``http(s)://host[:port][/prefix]``, on this machine or any other; a URL ending in
  ``/v1`` (an OpenAI *base* URL) is taken as the server's root with a note (``Endpoint.notes``),
  since the dialects name their paths from the root (``/v1/completions``, ``/generate``,
  ``/completion``).  Redirects are not followed (an ``EndpointError`` names the target), so the
  API key goes to no other host;
- **the API key**: read from the environment variable ``api_key_env`` (default
  ``OPENAI_API_KEY``) and sent as ``Authorization: Bearer …``; never printed, logged, stored or
  put in an error message (``Endpoint.__repr__`` hides it); never sent in clear text off this
  machine: a key with an ``http://`` URL whose host is not loopback is refused unless ``insecure``;
- **gentle**: every request waits for ``pacing.Pacer`` (at most ``concurrency`` in flight,
  halved on timeouts and HTTP 429/503/504, a timed-out request's slot held while the server may
  still compute it, ``Retry-After`` honoured, grown back on success, ``max_rps`` starts per
  second); a retry takes a slot like any request, so it never stacks on an abandoned one unseen;
- **bounded**: ``timeout_s`` per request, ``max_requests`` in all (then ``EndpointError``);
- **retries**: on HTTP 429 and 5xx, on timeouts and refused or reset connections, and on a
  2xx body that is not JSON (but not an HTML page), up to ``retries`` more tries per request,
  sleeping ``backoff_s · 2^i`` (at most ``MAX_BACKOFF_S``); every retry is counted
  (``Endpoint.counts``);
- **errors that name the cause**: ``EndpointUnreachable`` when the server cannot be reached at
  all (the first request, ``probe``); ``EndpointError`` for everything else, one line each, never
  a traceback: HTTP 401/403 ("the server refused the API key …"), an HTML answer ("… answered
  text/html, not JSON: is URL the API's base?"), another 4xx with the server's own message,
  retries exhausted, a redirect.
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

from spectr_gbv.certify.endpoint.pacing import OVERLOAD_STATUSES, Pacer

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
    if parsed.username or parsed.password:
        raise ValueError("URL must not carry a user or password (give the API key with --api-key-env)")
    path = parsed.path.rstrip("/")
    notes = []
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
        notes.append(f"{url} is an OpenAI base URL; using the server's root "
                     f"{parsed.scheme}://{parsed.netloc}{path} (paths such as /v1/completions are added)")
    return f"{parsed.scheme}://{parsed.netloc}{path}", notes


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects become HTTP errors (the API key must not follow them to another URL)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Endpoint:
    """One server (module doc).

    Args:
        url: the server's URL (``parse_base_url``).
        api_key_env: the environment variable holding the API key (absent or empty: no key).
        timeout_s: seconds per request (> 0).
        retries: further tries per request on a retryable failure (≥ 0).
        backoff_s: the first retry's sleep (≥ 0).
        max_requests: requests in all, retries included (≥ 1).
        insecure: send the API key over plain http to a host that is not loopback.
        concurrency: the most requests in flight (≥ 1; ``pacing.Pacer``'s ceiling).
        adaptive: lower and raise the requests in flight with the server's answers (``Pacer``).
        max_rps: the most request starts per second, or None.
    Attributes:
        root: the root URL; host: its host; notes: lines about the URL for the report;
        counts: ``Counter`` of requests, retries and failures by kind; pacer: the ``Pacer``;
        probe_status: the HTTP status of each probe path that answered with an error.
    Raises:
        ValueError: a bad URL, an API key that would travel over http off this machine without
            ``insecure``, bad numbers.
    """

    def __init__(self, url: str, *, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0,
                 retries: int = 4, backoff_s: float = 1.0, max_requests: int = 1_000_000, insecure: bool = False,
                 concurrency: int = 8, adaptive: bool = True, max_rps: float | None = None):
        self.root, self.notes = parse_base_url(url)
        parsed = urllib.parse.urlparse(self.root)
        self.host = parsed.hostname
        if not (timeout_s > 0 and retries >= 0 and backoff_s >= 0 and max_requests >= 1):
            raise ValueError("timeout_s must be > 0, retries ≥ 0, backoff_s ≥ 0 and max_requests ≥ 1")
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.max_requests = int(max_requests)
        self._key = os.environ.get(api_key_env) or None
        self.api_key_env = api_key_env
        if self._key and parsed.scheme == "http" and not is_loopback(self.host) and not insecure:
            raise ValueError(f"the API key in ${api_key_env} would travel in clear text over http to {self.host}: "
                             "use an https:// URL, or --insecure to send it anyway")
        if self._key and parsed.scheme == "http" and not is_loopback(self.host):
            self.notes.append(f"--insecure: the API key in ${api_key_env} is sent in clear text to {self.host}")
        self.pacer = Pacer(concurrency, adaptive=adaptive, ghost_s=self.timeout_s, max_rps=max_rps,
                           slow_s=self.timeout_s / 2)
        self.counts: Counter = Counter()
        self.probe_status: dict = {}
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

    def _key_refused(self, method: str, path: str, err: urllib.error.HTTPError) -> EndpointError:
        said = _error_message(err)
        if self._key:
            return EndpointError(f"{method} {path}: HTTP {err.code}: the server refused the API key in "
                                 f"${self.api_key_env} ({said}): check the key, or name the variable that holds "
                                 "the right one with --api-key-env VAR", err.code)
        return EndpointError(f"{method} {path}: HTTP {err.code}: the server asks for an API key and none was sent "
                             f"(${self.api_key_env} is not set; {said}): export the key in ${self.api_key_env}, or "
                             "name the variable that holds it with --api-key-env VAR", err.code)

    def _not_json(self, method: str, path: str, content_type: str, raw: bytes) -> EndpointError:
        return EndpointError(f"{method} {path}: the server answered {content_type or 'text'}, not JSON "
                             f"({_one_line(raw[:80].decode('utf-8', 'replace'))!r}): is {self.root} the API's base "
                             "(its root, e.g. http://HOST:8000, not a web page or a proxy's login)?")

    def probe(self, path: str, timeout_s: float = 5.0) -> dict | None:
        """One GET of ``path`` without retries, to learn whether the server is there.

        Returns:
            the JSON answer ({} for an empty or non-JSON text body), or None when the server
            answered with an HTTP error status other than 401/403 (it is there, but not at this
            path; the status is kept in ``probe_status``).
        Raises:
            EndpointUnreachable: refused, unknown host, or no answer within ``timeout_s``.
            EndpointError: HTTP 401/403 (the key), an HTML page, a redirect.
        """
        self._take_request()
        req = urllib.request.Request(self.root + path, headers=self._headers(), method="GET")
        try:
            with _OPENER.open(req, timeout=timeout_s) as resp:
                raw, ctype = resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            if err.code in (401, 403):
                raise self._key_refused("GET", path, err) from None
            if 300 <= err.code < 400:
                raise _redirected("GET", path, err) from None
            self.probe_status[path] = err.code
            return None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise EndpointUnreachable(f"{self.root} cannot be reached: {_one_line(reason)}") from None
        try:
            return json.loads(raw)
        except ValueError:
            if _is_html(ctype, raw):
                raise self._not_json("GET", path, ctype.split(";")[0], raw) from None
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
            self.pacer.acquire()
            outcome, started = "error", time.monotonic()
            try:
                with _OPENER.open(req, timeout=timeout_s or self.timeout_s) as resp:
                    raw, ctype = resp.read(), resp.headers.get("Content-Type", "")
                outcome = "ok"
                try:
                    return json.loads(raw)
                except ValueError:
                    if _is_html(ctype, raw):
                        raise self._not_json(method, path, ctype.split(";")[0], raw) from None
                    self._count("malformed JSON")
                    last = f"the answer is not JSON ({_one_line(raw[:120].decode('utf-8', 'replace'))!r})"
            except urllib.error.HTTPError as err:
                self._count(f"HTTP {err.code}")
                if err.code in (401, 403):
                    raise self._key_refused(method, path, err) from None
                if 300 <= err.code < 400:
                    raise _redirected(method, path, err) from None
                if err.code == 429 or err.code >= 500:
                    last = f"HTTP {err.code}: {_error_message(err)}"
                    wait = _retry_after(err)
                    outcome = "overload" if err.code in OVERLOAD_STATUSES else "error"
                else:
                    raise EndpointError(f"{method} {path}: HTTP {err.code}: {_error_message(err)}", err.code) from None
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as err:
                if _is_timeout(err):
                    self._count("timeouts")
                    outcome = "timeout"
                    last = f"no answer within {timeout_s or self.timeout_s:g} s"
                else:
                    self._count("connection")
                    last = f"no answer ({_one_line(getattr(err, 'reason', err))})"
            finally:
                self.pacer.release(outcome, wait, time.monotonic() - started)
            if attempt < self.retries:
                time.sleep(min(MAX_BACKOFF_S, self.backoff_s * 2 ** attempt))
        raise EndpointError(f"{method} {path}: {last} (after {self.retries + 1} tries)")


def _is_timeout(err: BaseException) -> bool:
    reason = getattr(err, "reason", None)
    return isinstance(err, (socket.timeout, TimeoutError)) or isinstance(reason, (socket.timeout, TimeoutError))


def _is_html(content_type: str, raw: bytes) -> bool:
    head = raw[:200].lstrip().lower()
    return "html" in (content_type or "").lower() or head.startswith(b"<!doctype html") or head.startswith(b"<html")


def _redirected(method: str, path: str, err: urllib.error.HTTPError) -> EndpointError:
    target = err.headers.get("Location", "?") if err.headers is not None else "?"
    return EndpointError(f"{method} {path}: HTTP {err.code}: the server redirects to {target}; give that URL "
                         "(redirects are not followed, so the API key goes nowhere else)", err.code)


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
