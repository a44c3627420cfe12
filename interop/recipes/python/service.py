"""The recipes of docs/guide/python.md, as one runnable service (the standard library's
http.server, requests, the OpenTelemetry SDK and its OTLP/HTTP exporter); the page quotes them
from this file and crates/hopbudget-cli/tests/fleet/recipes.rs runs them behind
`hopbudget proxy`.

Serves on 127.0.0.1:0 and prints "port N" first. Routes:

  /work        work that takes 30 s, bounded by the request's budget: answers 504 when it
               runs out.
  /call?to=URL calls URL with requests (through HTTP_PROXY, the proxy's egress), carrying the
               trace context; answers with the call's status and body.
  /grpc?to=HOST:PORT
               calls /proxy.Test/Echo at HOST:PORT (the proxy's --egress-to listener) with
               grpcio, carrying the trace context, whatever http_proxy says; answers 200, or
               502 with the call's status.

Each request is a span, exported at its end to OTEL_EXPORTER_OTLP_ENDPOINT. With
RECIPE_EXPORTER=own-session the exporter gets a session that ignores HTTP_PROXY.
"""

import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import grpc
import requests
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def exporter():
    if os.environ.get("RECIPE_EXPORTER") == "own-session":
        session = requests.Session()
        session.trust_env = False  # no HTTP_PROXY, whatever the environment says
        return OTLPSpanExporter(session=session)
    return OTLPSpanExporter()  # requests: HTTP_PROXY and NO_PROXY apply


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter()))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("recipes")


ANSWER_MS = 20  # kept from the budget to answer in


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        # The server span continues the trace the proxy handed over (it starts one when the
        # caller sent none).
        with tracer.start_as_current_span(
            "GET " + url.path, context=extract(self.headers), kind=trace.SpanKind.SERVER
        ):
            if url.path == "/work":
                self.work()
            elif url.path == "/call":
                self.call(parse_qs(url.query)["to"][0])
            elif url.path == "/grpc":
                self.grpc(parse_qs(url.query)["to"][0])
            else:
                self.answer(404, b"")

    def work(self):
        # The proxy's own deadline comes only its margin later: keep time to answer in.
        budget_ms = int(self.headers["x-request-timeout-ms"]) - ANSWER_MS
        deadline = time.monotonic() + budget_ms / 1000
        for _ in range(300):  # 30 s of work, in steps of at most 100 ms
            left = deadline - time.monotonic()
            if left <= 0:
                # Say so: the budget is spent, an answer now is one the caller no longer wants.
                return self.answer(504, b"deadline exceeded\n")
            time.sleep(min(0.1, left))
        self.answer(200, b"done\n")

    def call(self, to):
        headers = {}
        inject(headers)  # traceparent of the current span: the egress matches the call by it
        left = int(self.headers["x-request-timeout-ms"]) / 1000
        res = requests.get(to, headers=headers, timeout=left)
        self.answer(res.status_code, res.content)

    def grpc(self, to):
        headers = {}
        inject(headers)
        left = int(self.headers["x-request-timeout-ms"]) / 1000
        # to: the --egress-to listener; grpcio would otherwise take http_proxy for a CONNECT
        # tunnel, which the egress refuses (501, UNAVAILABLE).
        options = [("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(to, options=options) as channel:
            echo = channel.unary_unary("/proxy.Test/Echo")
            try:
                echo(b"", metadata=list(headers.items()), timeout=left)
            except grpc.RpcError as e:
                return self.answer(502, f"{e.code()} {e.details()}\n".encode())
        self.answer(200, b"ok\n")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"port {server.server_address[1]}", flush=True)
server.serve_forever()
