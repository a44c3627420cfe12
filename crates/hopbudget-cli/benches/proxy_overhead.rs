//! What `hopbudget proxy` adds to a request, beside nginx as a reverse proxy, in one run
//! (issue #37 item 5): latency (p50, p99) and the proxy process's CPU time per request.
//!
//! ```sh
//! cargo bench -p hopbudget-cli --bench proxy_overhead          # ROUNDS=5 RUN_SECONDS=2
//! ```
//!
//! An upstream (hyper, HTTP/1.1, answers `ok`) and the load generator run in this process;
//! the proxy (this package's `hopbudget` binary, built by `cargo bench` with the bench
//! profile) and nginx (`HOPBUDGET_NGINX`, default `nginx`; skipped when missing) are processes
//! of their own. Targets: the upstream directly, nginx (`proxy_pass` with keep-alive to the
//! upstream, `access_log off`, one worker), the proxy with `--admin` (metrics recorded) and
//! `--no-hop-log`, and the proxy with its default line per hop (to /dev/null). Each request
//! carries `x-request-timeout-ms: 500`. The load is closed-loop: CONNECTIONS (1, then 16)
//! keep-alive connections, each sending its next request when the answer arrives. Every
//! round runs every target in turn; each figure is the median over rounds. CPU per request:
//! the middle process's user + system time (from `/proc/PID/stat`) over the requests answered.
//!
//! One more target is the floor of any proxy made of hyper and tokio, as this one is: this
//! bench's own executable run again as a bare HTTP/1.1 proxy (hyper's server connection, one
//! `hyper::client::conn::http1` connection to the upstream per caller connection, a
//! current-thread runtime) that reads no header and records nothing. What `hopbudget proxy`
//! costs above it is the deadline contract; what the floor costs above nginx is the stack.
#![allow(missing_docs)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

struct Target {
    name: &'static str,
    addr: SocketAddr,
    pid: Option<u32>,
}

struct Run {
    p50_us: f64,
    p99_us: f64,
    rps: f64,
    cpu_us_per_req: Option<f64>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn start_proxy(upstream: SocketAddr, hop_log: bool) -> (Child, SocketAddr) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopbudget"));
    command
        .args(["proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--upstream", &upstream.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if !hop_log {
        command.arg("--no-hop-log");
    }
    let mut child = command.spawn().expect("the proxy starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the proxy says where it listens")
            .unwrap();
        if let Some(rest) = line.strip_prefix("listening on ") {
            break rest.split(',').next().unwrap().parse().unwrap();
        }
    };
    (child, addr)
}

fn start_nginx(upstream: SocketAddr) -> Option<(Child, SocketAddr, std::path::PathBuf)> {
    let nginx = std::env::var("HOPBUDGET_NGINX").unwrap_or_else(|_| "nginx".into());
    if Command::new(&nginx).arg("-v").output().is_err() {
        eprintln!("nginx not found (apt-get install nginx-light, or HOPBUDGET_NGINX): skipped");
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("hopbudget-bench-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {prefix}/nginx.pid;\n\
         error_log {prefix}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 100000000;\n  client_body_temp_path {prefix}/body;\n\
           proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n\
           uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n\
           upstream service {{ server {upstream}; keepalive 64; keepalive_requests 100000000; }}\n\
           server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
               proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n\
               proxy_pass http://service;\n    }}\n  }}\n}}\n"
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new(&nginx)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf_path)
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Some((child, addr, dir));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("nginx did not listen on {addr}");
}

/// User + system CPU time of `pid` so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // Linux reports in clock ticks of USER_HZ, 100 on every mainstream configuration.
    Duration::from_millis(ticks * 10)
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// The processes this bench started, killed however it ends.
struct Reaper(Vec<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn load(addr: SocketAddr, connections: usize, secs: f64) -> (Histogram<u64>, u64) {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3).unwrap();
            let mut sender = None;
            while Instant::now() < end {
                // A connection the far end closed (a keep-alive limit) is opened again.
                let open = match sender.take() {
                    Some(open) => open,
                    None => connect(addr).await,
                };
                let mut open: hyper::client::conn::http1::SendRequest<Empty<Bytes>> = open;
                let req = hyper::Request::get(format!("http://{addr}/items/7"))
                    .header("host", addr.to_string())
                    .header("x-request-timeout-ms", "500")
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let start = Instant::now();
                if open.ready().await.is_err() {
                    continue;
                }
                let Ok(res) = open.send_request(req).await else {
                    continue;
                };
                assert_eq!(res.status(), 200);
                if res.into_body().collect().await.is_err() {
                    continue;
                }
                hist.record(start.elapsed().as_micros() as u64).unwrap();
                sender = Some(open);
            }
            hist
        }));
    }
    let mut all = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3).unwrap();
    for task in tasks {
        all.add(task.await.unwrap()).unwrap();
    }
    let n = all.len();
    (all, n)
}

async fn measure(target: &Target, connections: usize, secs: f64) -> Run {
    let before = target.pid.map(cpu);
    let started = Instant::now();
    let (hist, n) = load(target.addr, connections, secs).await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_us_per_req = target
        .pid
        .zip(before)
        .map(|(pid, before)| (cpu(pid) - before).as_secs_f64() * 1e6 / n as f64);
    Run {
        p50_us: hist.value_at_quantile(0.5) as f64,
        p99_us: hist.value_at_quantile(0.99) as f64,
        rps: n as f64 / elapsed,
        cpu_us_per_req,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Set to the upstream's address: this process is the hyper floor, not the bench.
const FLOOR_ENV: &str = "PROXY_OVERHEAD_FLOOR_UPSTREAM";

/// The hyper floor: a bare HTTP/1.1 proxy, each caller connection with its own connection to
/// `upstream`; prints `listening on ADDR, upstream UPSTREAM` as the proxy does.
fn hyper_floor(upstream: String) {
    use std::io::Error;
    use std::sync::{Arc, Mutex};

    use hyper::body::Incoming;
    use hyper::client::conn::http1::SendRequest;
    type Sender = SendRequest<Incoming>;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!(
            "listening on {}, upstream {upstream}",
            listener.local_addr().unwrap()
        );
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let slot: Arc<Mutex<Option<Sender>>> = Arc::default();
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let slot = slot.clone();
                    let upstream = upstream.clone();
                    async move {
                        let held = slot.lock().unwrap().take();
                        let mut sender = match held {
                            Some(sender) => sender,
                            None => {
                                let stream = tokio::net::TcpStream::connect(&upstream).await?;
                                stream.set_nodelay(true)?;
                                let (sender, conn) =
                                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                                        .await
                                        .map_err(Error::other)?;
                                tokio::spawn(conn);
                                sender
                            }
                        };
                        sender.ready().await.map_err(Error::other)?;
                        let res = sender.send_request(req).await.map_err(Error::other)?;
                        *slot.lock().unwrap() = Some(sender);
                        Ok::<_, Error>(res)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

fn start_floor(upstream: SocketAddr) -> (Child, SocketAddr) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(FLOOR_ENV, upstream.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the floor starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .next()
        .expect("the floor says where it listens")
        .unwrap();
    let rest = line.strip_prefix("listening on ").unwrap();
    (child, rest.split(',').next().unwrap().parse().unwrap())
}

fn main() {
    if let Ok(upstream) = std::env::var(FLOOR_ENV) {
        return hyper_floor(upstream);
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it once, briefly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds: usize = if quick { 1 } else { env_or("ROUNDS", 5) };
    let secs: f64 = if quick {
        0.2
    } else {
        env_or("RUN_SECONDS", 2.0)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let up = upstream().await;
        let mut reaper = Reaper(Vec::new());
        let mut targets = vec![Target { name: "direct", addr: up, pid: None }];
        let mut nginx_dir = None;
        if let Some((child, addr, dir)) = start_nginx(up) {
            targets.push(Target { name: "nginx", addr, pid: Some(child.id()) });
            reaper.0.push(child);
            nginx_dir = Some(dir);
        }
        let (child, addr) = start_floor(up);
        targets.push(Target { name: "hyper floor", addr, pid: Some(child.id()) });
        reaper.0.push(child);
        for (name, hop_log) in [("hopbudget proxy", false), ("hopbudget proxy, hop log", true)] {
            let (child, addr) = start_proxy(up, hop_log);
            targets.push(Target { name, addr, pid: Some(child.id()) });
            reaper.0.push(child);
        }
        // Warm every path (connection pools, allocators) before measuring.
        for target in &targets {
            load(target.addr, 16, 0.3).await;
        }
        println!("| connections | target | p50 µs | p99 µs | added p50 µs | added p99 µs | req/s | CPU µs/req |");
        println!("|---|---|---|---|---|---|---|---|");
        for connections in [1, 16] {
            let mut runs: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
            for _ in 0..rounds {
                for (i, target) in targets.iter().enumerate() {
                    runs[i].push(measure(target, connections, secs).await);
                }
            }
            let direct_p50 = median(runs[0].iter().map(|r| r.p50_us).collect());
            let direct_p99 = median(runs[0].iter().map(|r| r.p99_us).collect());
            for (target, runs) in targets.iter().zip(&runs) {
                let p50 = median(runs.iter().map(|r| r.p50_us).collect());
                let p99 = median(runs.iter().map(|r| r.p99_us).collect());
                let rps = median(runs.iter().map(|r| r.rps).collect());
                let cpu = runs
                    .iter()
                    .map(|r| r.cpu_us_per_req)
                    .collect::<Option<Vec<_>>>()
                    .map(median);
                println!(
                    "| {connections} | {} | {p50:.0} | {p99:.0} | {:.0} | {:.0} | {rps:.0} | {} |",
                    target.name,
                    p50 - direct_p50,
                    p99 - direct_p99,
                    cpu.map_or("-".to_owned(), |c| format!("{c:.1}")),
                );
            }
        }
        drop(reaper);
        if let Some(dir) = nginx_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
}
