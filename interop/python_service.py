"""A Python service for hopbudget's sidecar tests (crates/hopbudget-cli/tests/fleet/polyglot.rs).

It reports on stdout what its handlers live through, so a test can see that `hopbudget proxy`
in front of it restates the budget and ends its request at the deadline (rule C25, issue #37).

Usage:
  python_service.py http
      An HTTP/1.1 service on 127.0.0.1:0 (the standard library's ThreadingHTTPServer); the
      first line printed is "port N". Routes:
      /wait   prints "arrived x-request-timeout-ms=V", then works in 10 ms steps, checking
              between steps whether the connection it answers on has been closed (EOF or
              reset when read). Prints "cancelled by=eof" (or "by=reset") and stops when it
              has, or "finished" after 30 s.
      /forward?to=URL[&via=PROXY_URL][&keep=1 | &fresh=MS]
              prints "arrived x-request-timeout-ms=V", then calls URL with the inbound
              `traceparent` (as an OpenTelemetry-instrumented service would), through the
              HTTP proxy PROXY_URL when given, else the one in HTTP_PROXY when set (the
              test passes it per call: it starts the service before the sidecar whose
              `--egress` it is). Without keep or fresh it sends no deadline:
              it forgets its own (S13); with fresh=MS it sends a new x-request-timeout-ms of
              its own; with keep=1 it forwards the inbound one as it is. Prints
              "forwarded status=N" and answers with the call's status and body.
  python_service.py grpc
      A grpcio service on 127.0.0.1:0 (the port printed as "port N"), every method. Each call
      prints "arrived METHOD deadline_ms=N": what grpcio's context.time_remaining() says on
      arrival ("none" without a deadline). A method ending in "/Wait" then works in 10 ms
      steps while context.is_active(), and prints "cancelled active=false" when it turns
      false (deadline passed or the call was reset), or "finished" after 30 s; any other
      method answers empty bytes at once.

A Python HTTP handler is not told when its caller goes away: it notices only by looking at
the connection (a read that returns EOF, as here) or when a write to it fails. See
docs/guide/proxy.md.
"""
import http.server
import select
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

WORK_LIMIT_S = 30.0
STEP_S = 0.01


def say(line):
    print(line, flush=True)


def connection_closed(sock):
    """"eof" or "reset" once the peer has closed `sock`, else None. Never blocks.

    A readable socket whose peek returns no bytes has read EOF: the peer closed it. Bytes
    waiting (a pipelined request) mean it is still open."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return None
    try:
        return "eof" if sock.recv(1, socket.MSG_PEEK) == b"" else None
    except ConnectionResetError:
        return "reset"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass  # stdout is the test's channel; no access log

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        say("arrived x-request-timeout-ms=%s" % (self.headers.get("x-request-timeout-ms") or ""))
        if url.path == "/wait":
            self.wait()
        elif url.path == "/forward":
            self.forward(query)
        else:
            self.answer(404, b"not found\n")

    def wait(self):
        # The work ignores the budget it was told on purpose: the test shows that the proxy
        # stops it anyway, by closing the connection, once the service checks for that.
        started = time.monotonic()
        while time.monotonic() - started < WORK_LIMIT_S:
            # One step of work, cut short when the connection turns readable (EOF or bytes).
            select.select([self.connection], [], [], STEP_S)
            closed = connection_closed(self.connection)
            if closed:
                say("cancelled by=%s" % closed)
                self.close_connection = True
                return
        say("finished")
        self.answer(200, b"finished\n")

    def forward(self, query):
        headers = {"traceparent": self.headers.get("traceparent", "")}
        if query.get("keep") == "1":
            headers["x-request-timeout-ms"] = self.headers.get("x-request-timeout-ms", "")
        elif "fresh" in query:
            headers["x-request-timeout-ms"] = query["fresh"]
        call = urllib.request.Request(query["to"], headers=headers)
        # urllib takes HTTP_PROXY from the environment, as requests does, unless told.
        proxies = {"http": query["via"]} if "via" in query else None
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
        try:
            with opener.open(call) as res:
                status, body = res.status, res.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
        except OSError as e:
            say("forward failed err=%s" % e)
            self.answer(502, str(e).encode())
            return
        say("forwarded status=%d" % status)
        try:
            self.answer(status, body)
        except OSError:
            pass  # the caller went away meanwhile (the proxy closed it at the deadline)


def serve_http():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    say("port %d" % server.server_address[1])
    server.serve_forever()


def serve_grpc():
    from concurrent import futures

    import grpc

    class Generic(grpc.GenericRpcHandler):
        def service(self, details):
            method = details.method

            def handle(request, context):
                remaining = context.time_remaining()
                # Without a deadline grpcio says None, or (as of 1.6x) a remainder of ages.
                none = remaining is None or remaining > 1e9
                left = "none" if none else str(int(remaining * 1000))
                say("arrived %s deadline_ms=%s" % (method, left))
                if not method.endswith("/Wait"):
                    return b""
                started = time.monotonic()
                while time.monotonic() - started < WORK_LIMIT_S:
                    if not context.is_active():
                        say("cancelled active=false")
                        return b""
                    time.sleep(STEP_S)
                say("finished")
                return b""

            # No serializers: the messages stay bytes, so no generated code is needed.
            return grpc.unary_unary_rpc_method_handler(handle)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((Generic(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    say("port %d" % port)
    server.wait_for_termination()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "http":
        serve_http()
    elif mode == "grpc":
        serve_grpc()
    else:
        sys.exit("usage: python_service.py http|grpc")
