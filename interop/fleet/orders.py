"""orders: the Python Flask service of the fleet trial (S24, issue #45 item 5,
crates/hopbudget-cli/tests/fleet/trial.rs), behind its own `hopbudget proxy`. It calls stock
over HTTP with requests, through HTTP_PROXY (its sidecar's --egress), and payments over gRPC
with grpcio, through its sidecar's --egress-to listener, as docs/guide/python.md says. Its
spans go to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT with the OpenTelemetry SDK, on a session that
ignores HTTP_PROXY, batched, and flushed on SIGTERM.

Serves on 127.0.0.1:0 and prints "port N" first. Environment:

  STOCK_URL     stock's address (its sidecar), e.g. http://127.0.0.1:8081
  PAYMENTS_AT   the --egress-to listener for payments, HOST:PORT
  ORDERS_MODE   healthy (forwards what is left of its budget and the trace context),
                forgetful (forwards the trace context, no deadline: the sidecar must still
                shrink the budget), or untraced (forwards neither: a real break, which the
                audit must name)

Route: /orders[?slow=1] prints "orders told=MS", calls stock (passing slow on), then, when
stock answered 200, payments' /payments.Payments/Charge; answers 200, or the status that
ended it.
"""

import logging
import os
import signal
import time

import grpc
import requests
from flask import Flask, request
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from werkzeug.serving import make_server

MODE = os.environ.get("ORDERS_MODE", "healthy")
STOCK_URL = os.environ["STOCK_URL"]
PAYMENTS_AT = os.environ["PAYMENTS_AT"]

session = requests.Session()
session.trust_env = False  # the exporter's own calls stay off the egress
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(session=session)))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("orders")

app = Flask("orders")
logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request


def outbound(deadline):
    """The headers of an outbound call, as this mode writes them."""
    headers = {}
    if MODE != "untraced":
        inject(headers)  # traceparent: the egress finds the inbound request by it
    if MODE == "healthy":
        headers["x-request-timeout-ms"] = str(max(0, int((deadline - time.monotonic()) * 1000)))
    return headers


@app.get("/orders")
def orders():
    start = time.monotonic()
    told = request.headers.get("x-request-timeout-ms", "none")
    print(f"orders told={told}", flush=True)
    deadline = start + (int(told) / 1000 if told.isdigit() else 1.0)
    with tracer.start_as_current_span(
        "GET /orders", context=extract(request.headers), kind=trace.SpanKind.SERVER
    ):
        slow = "?slow=1" if request.args.get("slow") == "1" else ""
        with tracer.start_as_current_span("GET /stock", kind=trace.SpanKind.CLIENT):
            try:
                res = requests.get(
                    STOCK_URL + "/stock" + slow,
                    headers=outbound(deadline),
                    timeout=None if MODE != "healthy" else max(0.001, deadline - time.monotonic()),
                )
            except requests.RequestException as e:
                return f"stock: {e}\n", 504
        if res.status_code != 200:
            return res.content, res.status_code
        # grpcio would take http_proxy for a CONNECT tunnel: dial the --egress-to listener.
        with tracer.start_as_current_span("Charge", kind=trace.SpanKind.CLIENT):
            with grpc.insecure_channel(PAYMENTS_AT, options=[("grpc.enable_http_proxy", 0)]) as ch:
                charge = ch.unary_unary("/payments.Payments/Charge")
                headers = outbound(deadline)
                timeout = None
                if "x-request-timeout-ms" in headers:
                    timeout = int(headers.pop("x-request-timeout-ms")) / 1000
                try:
                    charge(b"", metadata=list(headers.items()), timeout=timeout)
                except grpc.RpcError as e:
                    return f"payments: {e.code()}\n", 502
        return "ordered\n", 200


def stop(*_):
    provider.shutdown()  # exports the spans still batched
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
server = make_server("127.0.0.1", 0, app, threaded=True)
print(f"port {server.server_port}", flush=True)
server.serve_forever()
