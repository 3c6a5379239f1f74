"""A logging proxy for an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp's server): records
the traffic that ``spectr-gbv certify log FILE`` certifies.  Standard library only.

    python examples/logging_proxy.py --upstream http://127.0.0.1:8000 --log traffic.jsonl \\
        [--port 8001] [--host 127.0.0.1] [--add-logprobs K] [--token-ids] [--max-requests N] [--timeout S]

Clients talk to the proxy (``http://127.0.0.1:8001/v1``) instead of the server.  Every request is
forwarded to ``--upstream`` as received (its headers too, ``Authorization`` included, less the
hop-by-hop ones and ``Accept-Encoding``) and the server's answer is sent back as received.  For
each ``POST /v1/completions`` whose answer is a JSON object with ``choices``, one line is appended
to ``--log``::

    {"request": <the body as sent upstream>, "response": <the server's JSON answer>}

— the line format ``certify log`` reads (docs/howto/certify_a_log.md).  A streamed request
(``"stream": true``) is relayed event by event as it comes, and logged once its stream ends with
``data: [DONE]``: the events' choices put together (text concatenated, the ``logprobs`` lists of
each chunk appended in order, the last finish reason) as the answer the same request would get
unstreamed (``StreamedAnswer``).  Lines are written whole under a lock and flushed one by one, so
a log cut by a crash ends with whole lines (at most the last one partial).  Not logged, but
forwarded and counted (the summary on stderr at the end): error answers (HTTP status >= 400, or a
JSON answer without ``choices``), answers that are not JSON (a stream cut before ``[DONE]`` or
with an event that is not JSON among them), request bodies that are not JSON objects, and every
other path (``GET /v1/models``, ``POST /tokenize``, chat completions, ...).  An upstream that cannot be reached answers 502 (the proxy connects to it
directly, never through the environment's ``http_proxy``).

``--add-logprobs K`` adds ``"logprobs": K`` to completion requests that carry none (a client's own
``logprobs`` is kept), so that recorded traffic carries the top-k log-probabilities that
``certify log`` needs (vLLM: K ≤ its ``--max-logprobs``, default 20); ``--token-ids`` adds
``"return_tokens_as_token_ids": true`` (vLLM) where the request has no such field.  Neither changes
what is sampled (vLLM computes the log-probabilities beside the sampler): clients get the same
text, with extra fields in the answer (``choices[i].logprobs`` filled where it was null; with
``--token-ids``, the ``logprobs.tokens`` of a client that asked for log-probabilities are
``"token_id:N"`` strings instead of text).  The log holds the request as sent upstream, with those
fields, which is what ``certify log`` reads.

The proxy binds 127.0.0.1 unless ``--host`` says otherwise (it adds no authentication of its own:
put it where the server's own clients already are).  ``--max-requests N`` stops it after N
requests answered; Ctrl-C or SIGTERM stops it after the requests in flight have been answered and
logged.  The library use (tests): ``make_server(...)`` returns the server, ``server.stats`` its
counts.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# request headers not forwarded (hop-by-hop, recomputed, or an encoding the proxy could not read)
_DROP_REQUEST = {"host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
                 "upgrade", "content-length", "accept-encoding", "proxy-authorization"}
_DROP_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}
COMPLETIONS = "/v1/completions"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to --upstream, never via http_proxy


class LoggingProxy(ThreadingHTTPServer):
    """The proxy's server: its settings, its log file, its counts (``stats``)."""

    daemon_threads = False  # server_close() waits for the requests in flight: their lines are written whole

    def __init__(self, address, upstream: str, log_path: str, add_logprobs: int = 0, token_ids: bool = False,
                 max_requests: int = 0, timeout: float = 600.0):
        super().__init__(address, _Handler)
        self.upstream = upstream.rstrip("/")
        if self.upstream.endswith("/v1"):  # accept the clients' base URL too
            self.upstream = self.upstream[:-3]
        self.add_logprobs, self.token_ids = int(add_logprobs), bool(token_ids)
        self.max_requests, self.timeout = int(max_requests), float(timeout)
        self.log = open(log_path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "logged": 0, "streamed": 0, "errors": 0, "not_json": 0, "passed_through": 0,
                      "unreachable": 0}
        self._stopping = False

    def count(self, key: str) -> None:
        with self.lock:
            self.stats[key] += 1

    def write_line(self, request: dict, response: dict) -> None:
        line = json.dumps({"request": request, "response": response}, ensure_ascii=False, separators=(",", ":"))
        with self.lock:
            self.log.write(line + "\n")
            self.log.flush()
            self.stats["logged"] += 1

    def answered(self) -> None:
        """Count one request answered; past ``max_requests``, stop serving (from another thread:
        ``shutdown`` waits for the serving loop, which waits for nothing of this handler's)."""
        with self.lock:
            self.stats["requests"] += 1
            stop = self.max_requests and self.stats["requests"] >= self.max_requests and not self._stopping
            if stop:
                self._stopping = True
        if stop:
            threading.Thread(target=self.shutdown, daemon=True).start()

    def server_close(self) -> None:
        super().server_close()  # joins the handler threads (daemon_threads False)
        with self.lock:
            if not self.log.closed:
                self.log.close()

    def summary(self) -> str:
        s = self.stats
        return (f"logging proxy: {s['requests']} requests answered; {s['logged']} completions logged "
                f"({s['streamed']} streamed); not logged: {s['errors']} error answers, {s['not_json']} not JSON "
                f"(streams cut short among them), {s['unreachable']} upstream unreachable; {s['passed_through']} other "
                "paths passed through")


def _completion_body(server: LoggingProxy, raw: bytes):
    """(body to send, parsed body or None, streamed): the completion request with --add-logprobs
    and --token-ids applied when it is a JSON object (else None, unchanged)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw, None, False
    if not isinstance(body, dict):
        return raw, None, False
    stream = bool(body.get("stream"))
    changed = False
    if server.add_logprobs and body.get("logprobs") is None:
        body["logprobs"], changed = server.add_logprobs, True
    if server.token_ids and "return_tokens_as_token_ids" not in body:
        body["return_tokens_as_token_ids"], changed = True, True
    return (json.dumps(body).encode("utf-8") if changed else raw), body, stream


class StreamedAnswer:
    """A streamed completion's server-sent events (``feed`` the bytes as relayed) put together as
    the answer the request would get unstreamed: ``answer()``, or None when the stream did not end
    with ``data: [DONE]``, an event was not a JSON object, or no event had a choice."""

    _LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")

    def __init__(self):
        self._buf = b""
        self._head: dict = {}
        self._choices: dict = {}
        self.done = False
        self.bad = False

    def feed(self, chunk: bytes) -> None:
        self._buf = (self._buf + chunk).replace(b"\r\n", b"\n")
        while b"\n\n" in self._buf:
            event, self._buf = self._buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._data(line[5:].strip())

    def _data(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("choices", []), list):
            self.bad = True
            return
        for key in ("id", "object", "created", "model"):
            self._head.setdefault(key, obj.get(key))
        for c in obj.get("choices") or []:
            if not isinstance(c, dict) or not isinstance(c.get("index", 0), int):
                self.bad = True
                continue
            acc = self._choices.setdefault(c.get("index", 0), {"index": c.get("index", 0), "text": "",
                                                                "finish_reason": None, "logprobs": None})
            acc["text"] += c.get("text") or ""
            if c.get("finish_reason") is not None:
                acc["finish_reason"] = c["finish_reason"]
            lp = c.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
                if acc["logprobs"] is None:
                    acc["logprobs"] = {key: [] for key in self._LISTS}
                n = len(lp["tokens"])
                for key in self._LISTS:
                    v = lp.get(key)
                    acc["logprobs"][key].extend(v if isinstance(v, list) and len(v) == n else [None] * n)

    def answer(self) -> dict | None:
        if not self.done or self.bad or not self._choices:
            return None
        return {**self._head, "object": "text_completion",
                "choices": [self._choices[i] for i in sorted(self._choices)]}


class _Handler(BaseHTTPRequestHandler):
    server: LoggingProxy
    protocol_version = "HTTP/1.0"  # one request a connection: a relayed stream ends when the connection closes

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._forward(None)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self._forward(self.rfile.read(length) if length > 0 else b"")

    def _forward(self, raw):
        try:
            self._relay(raw)
        finally:
            self.server.answered()

    def _relay(self, raw):
        srv = self.server
        path = self.path
        logged = raw is not None and path.split("?")[0] == COMPLETIONS
        sent, body, stream = _completion_body(srv, raw) if logged else (raw, None, False)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _DROP_REQUEST}
        req = urllib.request.Request(srv.upstream + path, data=sent, method=self.command, headers=headers)
        try:
            resp = _DIRECT.open(req, timeout=srv.timeout)
            status = resp.status
        except urllib.error.HTTPError as err:
            resp, status = err, err.code
        except (urllib.error.URLError, OSError) as err:  # refused, timed out, reset
            srv.count("unreachable")
            return self._send(502, [("Content-Type", "application/json")], json.dumps(
                {"error": {"message": f"logging proxy: upstream {srv.upstream} unreachable: {err}"}}).encode())
        with resp:
            out_headers = [(k, v) for k, v in resp.headers.items() if k.lower() not in _DROP_RESPONSE]
            if stream and status < 400:
                srv.count("streamed")
                answer = self._stream(status, out_headers, resp)
                if answer is None:
                    srv.count("not_json")
                else:
                    srv.write_line(body, answer)
                return
            data = resp.read()
        self._send(status, out_headers, data)
        if not logged:
            srv.count("passed_through")
        elif status >= 400:
            srv.count("errors")
        elif body is None:
            srv.count("not_json")  # the request body was not a JSON object
        else:
            try:
                answer = json.loads(data)
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                srv.count("not_json")
            elif not isinstance(answer.get("choices"), list) or not answer["choices"]:
                srv.count("errors")
            else:
                srv.write_line(body, answer)

    def _send(self, status, headers, data):
        try:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up; the answer is still logged

    def _stream(self, status, headers, resp) -> dict | None:
        """Relay the stream as it comes; the answer put together (``StreamedAnswer``), or None."""
        whole = StreamedAnswer()
        client = True
        try:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
        except (BrokenPipeError, ConnectionResetError):
            client = False
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            whole.feed(chunk)
            if client:
                try:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    client = False  # the client gave up; the stream is still read to its end and logged
        return whole.answer()


def make_server(upstream: str, log_path: str, *, host: str = "127.0.0.1", port: int = 8001, add_logprobs: int = 0,
                token_ids: bool = False, max_requests: int = 0, timeout: float = 600.0) -> LoggingProxy:
    """The proxy, bound and not yet serving (``serve_forever()``; ``port=0``: an OS-chosen port,
    ``server.server_port``)."""
    return LoggingProxy((host, port), upstream, log_path, add_logprobs=add_logprobs, token_ids=token_ids,
                        max_requests=max_requests, timeout=timeout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--upstream", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--log", required=True, help="the JSONL file the completions are appended to")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8001, help="port to listen on (default 8001; 0: any free port)")
    p.add_argument("--add-logprobs", dest="add_logprobs", type=int, default=0, metavar="K",
                   help="add \"logprobs\": K to completion requests that carry none (clients then get extra "
                   "fields in the answer, the same text)")
    p.add_argument("--token-ids", dest="token_ids", action="store_true",
                   help="add \"return_tokens_as_token_ids\": true (vLLM) to completion requests without it")
    p.add_argument("--max-requests", dest="max_requests", type=int, default=0, metavar="N",
                   help="stop after N requests answered (default 0: run until Ctrl-C or SIGTERM)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the upstream (default 600)")
    args = p.parse_args(argv)
    if args.add_logprobs < 0 or args.max_requests < 0 or args.timeout <= 0:
        p.error("--add-logprobs and --max-requests must be >= 0, --timeout > 0")
    server = make_server(args.upstream, args.log, host=args.host, port=args.port, add_logprobs=args.add_logprobs,
                         token_ids=args.token_ids, max_requests=args.max_requests, timeout=args.timeout)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    # Ctrl-C stops it even where SIGINT was ignored when it started (a parent that ignores SIGINT,
    # such as a test runner's worker, hands that on, and Python then installs no handler)
    signal.signal(signal.SIGINT, on_term)
    print(f"logging proxy: http://{args.host}:{server.server_port} -> {server.upstream}, appending to {args.log}",
          file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("logging proxy: stopping after the requests in flight", file=sys.stderr)
    finally:
        server.server_close()
        print(server.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
