"""Python HTTP clients for hopbudget's early-answer test (crates/hopbudget/tests/http/early_answer_clients.rs, S14).

Usage: python3 python_early_answer.py CLIENT URL TIMEOUT_MS BODY_BYTES ROUNDS AGENT FRAMING DELAY_MS PIECES

CLIENT is `stdlib` (the standard library's http.client) or `requests` (requests over
urllib3). Each round POSTs to URL with `x-request-timeout-ms: TIMEOUT_MS`. The client sends the
headers at once and the BODY_BYTES body from a generator, in PIECES equal pieces, each DELAY_MS
after the last, as an upload streamed from a slow source is sent. AGENT is `fresh` (one
connection per round) or `keep-alive` (one reused connection); FRAMING is `length`
(Content-Length) or `chunked`. Prints one JSON line:
{"status": {"503": n, ...}, "error": {"<error>": n, ...}}.
"""

import http.client
import json
import sys
import time
import urllib.parse
from collections import Counter


def pieces_of(total, pieces, delay):
    """The body, as a slow source yields it: PIECES pieces, DELAY seconds apart."""
    piece = b"x" * (total // pieces)
    last = piece + b"x" * (total % pieces)
    for p in range(pieces):
        time.sleep(delay)
        yield last if p == pieces - 1 else piece


class Sized:
    """An iterable body with a length: requests sends it with Content-Length, unchunked."""

    def __init__(self, iterable, length):
        self.iterable, self.length = iterable, length

    def __iter__(self):
        return iter(self.iterable)

    def __len__(self):
        return self.length


def headers(budget):
    return {"x-request-timeout-ms": budget, "content-type": "application/octet-stream"}


def stdlib(url, budget, total, rounds, keep_alive, chunked, delay, pieces, tally):
    parts = urllib.parse.urlsplit(url)
    conn = None
    for _ in range(rounds):
        if conn is None:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        try:
            sent = headers(budget)
            if not chunked:
                sent["content-length"] = str(total)
            body = pieces_of(total, pieces, delay)
            conn.request("POST", parts.path, body=body, headers=sent, encode_chunked=chunked)
            res = conn.getresponse()
            res.read()
            tally["status"][str(res.status)] += 1
            if res.will_close or not keep_alive:
                conn.close()
                conn = None
        except Exception as e:  # noqa: BLE001 - every failure is counted by its kind
            tally["error"][f"{type(e).__name__}: {e}"] += 1
            conn.close()
            conn = None


def with_requests(url, budget, total, rounds, keep_alive, chunked, delay, pieces, tally):
    import requests

    session = requests.Session()
    for _ in range(rounds):
        if not keep_alive:
            session.close()
            session = requests.Session()
        try:
            body = pieces_of(total, pieces, delay)
            if not chunked:
                body = Sized(body, total)
            res = session.post(url, data=body, headers=headers(budget), timeout=10)
            tally["status"][str(res.status_code)] += 1
        except Exception as e:  # noqa: BLE001 - every failure is counted by its kind
            tally["error"][f"{type(e).__name__}: {str(e)[:200]}"] += 1


def main():
    if len(sys.argv) != 10:
        sys.exit(__doc__)
    client, url, budget, total, rounds, agent, framing, delay_ms, pieces = sys.argv[1:]
    run = {"stdlib": stdlib, "requests": with_requests}.get(client)
    if run is None or agent not in ("fresh", "keep-alive") or framing not in ("length", "chunked"):
        sys.exit(__doc__)
    total, pieces = int(total), int(pieces)
    if not 1 <= pieces <= max(total, 1):
        sys.exit("PIECES must be between 1 and BODY_BYTES")
    tally = {"status": Counter(), "error": Counter()}
    run(url, budget, total, int(rounds), agent == "keep-alive", framing == "chunked",
        int(delay_ms) / 1000, pieces, tally)
    print(json.dumps({kind: dict(counts) for kind, counts in tally.items()}))


if __name__ == "__main__":
    main()
