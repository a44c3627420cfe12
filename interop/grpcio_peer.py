"""A grpcio (Python) peer for hopbudget's gRPC interop test (crates/hopbudget/tests/grpc/peer_grpcio.rs).

Usage:
  grpcio_peer.py client ADDR METHOD REQUEST_HEX TIMEOUT_S
      Calls METHOD on ADDR with the raw request bytes and a grpcio deadline, then prints one
      JSON line: {"code": "OK" | status name, "reply_hex": ..., "trailers": {...}}.
  grpcio_peer.py server SLEEP_S
      Serves every method on 127.0.0.1:0 (port printed on the first line); each call sleeps
      SLEEP_S, then answers empty bytes with trailing metadata `x-time-remaining-ms`: what
      grpcio's context.time_remaining() said when the call arrived.
"""
import json
import sys
import time
from concurrent import futures

import grpc


def client(addr, method, request_hex, timeout_s):
    channel = grpc.insecure_channel(addr)
    call = channel.unary_unary(method)
    try:
        reply, rpc = call.with_call(bytes.fromhex(request_hex), timeout=float(timeout_s))
        out = {"code": "OK", "reply_hex": reply.hex(), "trailers": dict(rpc.trailing_metadata() or [])}
    except grpc.RpcError as e:
        out = {"code": e.code().name, "reply_hex": "", "details": e.details(),
               "trailers": dict(e.trailing_metadata() or [])}
    print(json.dumps(out), flush=True)


class Handler(grpc.GenericRpcHandler):
    def __init__(self, sleep_s):
        self.sleep_s = sleep_s

    def service(self, details):
        def handle(request, context):
            remaining = context.time_remaining()
            ms = "none" if remaining is None else str(int(remaining * 1000))
            context.set_trailing_metadata((("x-time-remaining-ms", ms),))
            time.sleep(self.sleep_s)
            return b""
        return grpc.unary_unary_rpc_method_handler(handle)


def server(sleep_s):
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    srv.add_generic_rpc_handlers((Handler(float(sleep_s)),))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    print(port, flush=True)
    srv.wait_for_termination()


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client(*sys.argv[2:6])
    elif sys.argv[1] == "server":
        server(sys.argv[2])
    else:
        sys.exit("usage: grpcio_peer.py client|server ...")
