#!/usr/bin/env python3
"""A normal caller's latency through `hopbudget proxy` while hostile callers attack it (#46 item 9).

    scripts/proxy_attacks.py              # RUN_SECONDS=5 ROUNDS=3

One proxy (release build, `--no-hop-log`) in front of an nginx that answers `ok` itself and
serves a 50 MB file at /big. A normal caller (wrk, one thread, 4 keep-alive connections, a
500 ms budget on each request) is measured with no attack, then under each attack in turn,
the attack started a second before wrk and stopped after it. Each row is the median over
ROUNDS of wrk's p50 and p99, beside the same round's figures with no attack, and what the
proxy did to the attackers (its own counters, from `--admin`):

- slowloris:        1,000 connections sending a request head a byte every 5 s;
- idle:             1,000 connections that send nothing;
- body stall:       500 connections sending a head that promises a body, then 5 bytes of it;
- non-reader:       20 connections asking for /big (50 MB) under a 2 s budget, reading none;
- PING flood:       one HTTP/2 connection sending PINGs as fast as it can, reading the ACKs;
- rapid reset:      one HTTP/2 connection opening streams and resetting them at once;
- h2 fan-out:       one HTTP/2 connection, 100 streams at once, each a request for /big
                    read slowly (the pooled connections to the service they open).

The proxy runs with `--header-read-timeout 2 --idle-timeout 3 --body-read-timeout 2`, so the
bounds act within a run; the defaults (10 s, 60 s, 30 s) act the same, later. ATTACKS picks
some (`ATTACKS="slowloris idle"`). Needs wrk and nginx (apt-get install wrk nginx-light); BIN
overrides the proxy binary.
"""
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proxy_wrk import cargo_executable, free_port, listening, need, nginx, wait_port  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
SECONDS = int(os.environ.get("RUN_SECONDS", "5"))
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


# A GET for /big on stream N: HPACK static :method GET (2), :scheme http (6), :path from a
# literal with :path's name (index 4), :authority `x` (literal, name index 1).
def get_big(stream):
    block = b"\x82\x86\x44\x04/big\x41\x01x"
    return frame(1, 0x4 | 0x1, stream, block)  # HEADERS, END_HEADERS | END_STREAM


class Attack:
    """Hostile callers in threads of their own, until `stop`."""

    def __init__(self, name, port):
        self.name, self.port, self.stop = name, port, threading.Event()
        self.threads = []

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port))
        s.settimeout(1)
        return s

    def spawn(self, target):
        t = threading.Thread(target=self.guard, args=(target,), daemon=True)
        t.start()
        self.threads.append(t)

    def guard(self, target):
        try:
            target()
        except OSError:
            pass  # the proxy closed it: that is the point

    def slowloris(self, n=1000):
        def run():
            socks = []
            for _ in range(n):
                try:
                    socks.append(self.connect())
                except OSError:
                    break
            head = b"GET / HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 1000
            i = 0
            while True:
                alive = []
                for s in socks:
                    try:
                        s.send(head[i:i + 1])
                        alive.append(s)
                    except OSError:
                        s.close()
                socks = alive or [self.connect() for _ in range(n)]
                i += 1
                if self.stop.wait(5):
                    break
            for s in socks:
                s.close()
        self.spawn(run)

    def idle(self, n=1000):
        def run():
            socks = []
            while not self.stop.is_set():
                while len(socks) < n and not self.stop.is_set():
                    socks.append(self.connect())
                self.stop.wait(1)
                socks = [s for s in socks if alive(s)]
            for s in socks:
                s.close()
        self.spawn(run)

    def body_stall(self, n=500):
        def run():
            while not self.stop.is_set():
                socks = []
                for _ in range(n):
                    s = self.connect()
                    s.sendall(b"POST / HTTP/1.1\r\nhost: x\r\nx-request-timeout-ms: 60000\r\n"
                              b"content-length: 100\r\n\r\n12345")
                    socks.append(s)
                while socks and not self.stop.wait(0.5):
                    socks = [s for s in socks if alive(s)]
                for s in socks:
                    s.close()
        self.spawn(run)

    def non_reader(self, n=20):
        def run():
            while not self.stop.is_set():
                socks = []
                for _ in range(n):
                    s = self.connect()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\nx-request-timeout-ms: 2000\r\n\r\n")
                    socks.append(s)
                while socks and not self.stop.wait(0.5):
                    socks = [s for s in socks if alive(s, peek_only=True)]
                for s in socks:
                    s.close()
        self.spawn(run)

    def ping_flood(self):
        def run():
            burst = frame(6, 0, 0, b"pingpong") * 200
            while not self.stop.is_set():
                s = self.connect()
                s.sendall(PREFACE + frame(4, 0, 0))
                try:
                    while not self.stop.is_set():
                        s.sendall(burst)
                        s.recv(65536)
                except OSError:
                    s.close()
        self.spawn(run)

    def rapid_reset(self):
        def run():
            while not self.stop.is_set():
                s = self.connect()
                s.sendall(PREFACE + frame(4, 0, 0))
                stream = 1
                try:
                    while not self.stop.is_set() and stream < 2**31 - 200:
                        batch = b""
                        for _ in range(100):
                            batch += get_big(stream) + frame(3, 0, stream, (8).to_bytes(4, "big"))
                            stream += 2
                        s.sendall(batch)
                        try:
                            s.recv(65536)
                        except socket.timeout:
                            pass
                except OSError:
                    s.close()
        self.spawn(run)

    def h2_fan_out(self, streams=100):
        def run():
            while not self.stop.is_set():
                s = self.connect()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(PREFACE + frame(4, 0, 0) + b"".join(get_big(1 + 2 * i) for i in range(streams)))
                try:
                    while not self.stop.is_set():
                        s.recv(1024)  # slowly
                        time.sleep(0.05)
                except OSError:
                    s.close()
        self.spawn(run)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def alive(s, peek_only=False):
    try:
        s.setblocking(False)
        data = s.recv(1 if peek_only else 4096, socket.MSG_PEEK if peek_only else 0)
        s.setblocking(True)
        s.settimeout(1)
        if data == b"":
            s.close()
            return False
        return True
    except BlockingIOError:
        s.setblocking(True)
        s.settimeout(1)
        return True
    except OSError:
        s.close()
        return False


def wrk(port):
    out = subprocess.run(
        ["wrk", "-t1", "-c4", f"-d{SECONDS}s", "--latency", "-H", "x-request-timeout-ms: 500",
         f"http://127.0.0.1:{port}/items/7"], capture_output=True, text=True, check=True).stdout
    ms = {"us": 1e-3, "ms": 1, "s": 1e3}
    def pct(p):
        value, unit = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)", out, re.M).groups()
        return float(value) * ms[unit]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return pct(50), pct(99), int(errors.group(1)) if errors else 0


def counters(admin):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    wanted = ("hopbudget_proxy_connections_closed_total", "hopbudget_proxy_streams_reset_total",
              "hopbudget_proxy_upstream_limit_reached_total", "hopbudget_proxy_connection_limit_reached_total")
    out = {}
    for line in text.splitlines():
        if line.startswith(wanted):
            name, value = line.rsplit(" ", 1)
            out[name.replace("hopbudget_proxy_", "")] = float(value)
    return out


def main():
    need("wrk")
    need("nginx")
    binary = os.environ.get("BIN") or cargo_executable(
        ["build", "-q", "--release", "-p", "hopbudget-cli", "--bin", "hopbudget"], "hopbudget")
    workdir = tempfile.mkdtemp()
    procs = []
    try:
        with open(os.path.join(workdir, "big"), "wb") as f:
            f.write(b"x" * (50 << 20))
        up = free_port()
        procs.append(nginx(workdir, "upstream", f"""server {{ listen 127.0.0.1:{up};
location /big {{ alias {workdir}/big; }} location / {{ return 200 ok; }} }}"""))
        wait_port(up)
        admin = free_port()
        proc = subprocess.Popen([binary, "proxy", "--listen", "127.0.0.1:0", "--admin", f"127.0.0.1:{admin}",
                                 "--upstream", f"127.0.0.1:{up}", "--no-hop-log", "--header-read-timeout", "2",
                                 "--idle-timeout", "3", "--body-read-timeout", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(proc)
        port = listening(proc)
        subprocess.run(["wrk", "-t1", "-c4", "-d1s", f"http://127.0.0.1:{port}/"], capture_output=True)
        attacks = os.environ.get("ATTACKS", "slowloris idle body_stall non_reader ping_flood rapid_reset h2_fan_out").split()
        rows = {a: [] for a in attacks}
        print(f"wrk -t1 -c4 -d{SECONDS}s, {ROUNDS} rounds, load average at the start {os.getloadavg()[0]:.1f}")
        for _ in range(ROUNDS):
            base = wrk(port)
            for name in attacks:
                before = counters(admin)
                attack = Attack(name, port)
                getattr(attack, name)()
                time.sleep(1)
                under = wrk(port)
                attack.finish()
                after = counters(admin)
                did = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
                rows[name].append((base, under, did))
                time.sleep(1)
        print("| attack | p50 ms, none | p99 ms, none | p50 ms, under it | p99 ms, under it | p99 ratio | non-2xx | what the proxy did (last round) |")
        print("|---|---|---|---|---|---|---|---|")
        for name in attacks:
            runs = rows[name]
            b50 = statistics.median(r[0][0] for r in runs)
            b99 = statistics.median(r[0][1] for r in runs)
            u50 = statistics.median(r[1][0] for r in runs)
            u99 = statistics.median(r[1][1] for r in runs)
            errors = sum(r[1][2] for r in runs)
            did = ", ".join(f"{k} +{v:.0f}" for k, v in sorted(runs[-1][2].items())) or "-"
            print(f"| {name.replace('_', ' ')} | {b50:.2f} | {b99:.2f} | {u50:.2f} | {u99:.2f} | {u99 / b99:.1f}x | {errors} | {did} |")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
