#!/usr/bin/env python3
"""Latency and CPU per request through `hopbudget proxy`, beside nginx, under wrk (#37 item 5).

    scripts/proxy_wrk.py                  # ROUNDS=3 RUN_SECONDS=5 CONNECTIONS="1 16"

Every target is a process of its own in front of the same upstream (an nginx answering `ok`
itself, not measured), loaded in turn by wrk (one thread, keep-alive, the header
`x-request-timeout-ms: 500` on every request), CONNECTIONS connections at a time:

- direct:      wrk straight to the upstream;
- nginx:       nginx as a reverse proxy (one worker, `proxy_pass` with `proxy_http_version
               1.1` and upstream `keepalive`, `access_log off`);
- hyper floor: the bare hyper proxy of benches/proxy_overhead.rs (hyper's server and client
               connections and nothing else: the least any proxy on hyper and tokio runs);
- proxy:       `hopbudget proxy --no-hop-log --admin` (metrics recorded);
- proxy, hop log: `hopbudget proxy --admin` with its default line per request, to /dev/null.

Rounds run every target in turn; each figure is the median over rounds. p50 and p99 are
wrk's (`--latency`); *added* is the target's minus direct's in the same round. CPU per request
is the target process's user + system time (/proc/PID/stat) over the requests wrk counted.
Needs wrk and nginx (apt-get install wrk nginx-light); BIN and FLOOR_BIN override the
binaries (built here by default).
"""
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SECONDS = int(os.environ.get("RUN_SECONDS", "5"))
CONNECTIONS = [int(c) for c in os.environ.get("CONNECTIONS", "1 16").split()]
TICK = os.sysconf("SC_CLK_TCK")


def need(tool):
    if shutil.which(tool) is None:
        sys.exit(f"{tool} is not installed (apt-get install wrk nginx-light)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port):
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def nginx(workdir, name, server):
    prefix = os.path.join(workdir, name)
    os.makedirs(prefix)
    temps = " ".join(f"{t}_temp_path {prefix}/{t};" for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = f"""daemon off; master_process off; worker_processes 1; pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn; events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 100000000; {temps}
{server}
}}
"""
    with open(os.path.join(prefix, "nginx.conf"), "w") as f:
        f.write(conf)
    return subprocess.Popen(["nginx", "-p", prefix, "-c", os.path.join(prefix, "nginx.conf")],
                            stderr=subprocess.DEVNULL)


def listening(proc):
    """The address a process prints as `listening on ADDR, ...` on stdout."""
    for line in proc.stdout:
        m = re.match(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m.group(1))
    sys.exit("a target exited before saying where it listens")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / TICK


def micros(text):
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]


def wrk(port, connections):
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{SECONDS}s", "--latency",
         "-H", "x-request-timeout-ms: 500", f"http://127.0.0.1:{port}/items/7"],
        capture_output=True, text=True, check=True).stdout
    p50 = micros(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = micros(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    if "Non-2xx" in out or "Socket errors" in out:
        sys.exit(f"errors through port {port}:\n{out}")
    return p50, p99, requests, rps


def cargo_executable(args, name):
    out = subprocess.run(["cargo", *args, "--message-format=json"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m["target"]["name"] == name and m.get("executable"):
            return m["executable"]
    sys.exit(f"cargo built no {name}")


def main():
    need("wrk")
    need("nginx")
    binary = os.environ.get("BIN") or cargo_executable(
        ["build", "-q", "--release", "-p", "hopbudget-cli", "--bin", "hopbudget"], "hopbudget")
    floor = os.environ.get("FLOOR_BIN") or cargo_executable(
        ["bench", "-q", "-p", "hopbudget-cli", "--bench", "proxy_overhead", "--no-run"], "proxy_overhead")
    workdir = tempfile.mkdtemp()
    procs = []
    try:
        up = free_port()
        procs.append(nginx(workdir, "upstream", f"server {{ listen 127.0.0.1:{up}; location / {{ return 200 ok; }} }}"))
        wait_port(up)
        targets = [("direct", up, None)]
        port = free_port()
        proc = nginx(workdir, "proxy", f"""upstream service {{ server 127.0.0.1:{up}; keepalive 64; keepalive_requests 100000000; }}
server {{ listen 127.0.0.1:{port}; location / {{ proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://service; }} }}""")
        procs.append(proc)
        wait_port(port)
        targets.append(("nginx", port, proc.pid))
        proc = subprocess.Popen([floor], env={**os.environ, "PROXY_OVERHEAD_FLOOR_UPSTREAM": f"127.0.0.1:{up}"},
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(proc)
        targets.append(("hyper floor", listening(proc), proc.pid))
        for name, extra in (("hopbudget proxy", ["--no-hop-log"]), ("hopbudget proxy, hop log", [])):
            proc = subprocess.Popen([binary, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
                                     "--upstream", f"127.0.0.1:{up}", *extra],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(proc)
            targets.append((name, listening(proc), proc.pid))
        for _, port, _ in targets:  # warm every path
            subprocess.run(["wrk", "-t1", "-c16", "-d1s", f"http://127.0.0.1:{port}/"], capture_output=True)
        print(f"wrk -t1 -cN -d{SECONDS}s --latency, {ROUNDS} rounds, load average at the start "
              f"{os.getloadavg()[0]:.1f}")
        print("| connections | target | p50 µs | p99 µs | added p50 µs | added p99 µs | req/s | CPU µs/req |")
        print("|---|---|---|---|---|---|---|---|")
        for connections in CONNECTIONS:
            runs = {name: [] for name, _, _ in targets}
            for _ in range(ROUNDS):
                direct = None
                for name, port, pid in targets:
                    before = cpu_seconds(pid) if pid else None
                    p50, p99, n, rps = wrk(port, connections)
                    cpu = (cpu_seconds(pid) - before) * 1e6 / n if pid else None
                    if direct is None:
                        direct = (p50, p99)
                    runs[name].append((p50, p99, p50 - direct[0], p99 - direct[1], rps, cpu))
            for name, _, _ in targets:
                cols = list(zip(*runs[name]))
                med = [statistics.median(c) if c[0] is not None else None for c in cols]
                cpu = "-" if med[5] is None else f"{med[5]:.1f}"
                print(f"| {connections} | {name} | {med[0]:.0f} | {med[1]:.0f} | {med[2]:.0f} | {med[3]:.0f} | {med[4]:.0f} | {cpu} |")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
