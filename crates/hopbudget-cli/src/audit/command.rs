//! The `audit` and `gen-traces` subcommands: arguments and what they print.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use super::AuditOptions;
use super::report::render;

/// `hopbudget audit FILE…`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 1 when a budget reset that is an error is found (a hop started with \
    more time than its caller had left: the chain lost its deadline there). A reset is an error \
    when it added a median of at least --reset-error-ms (100 ms) in at least \
    --reset-error-percent (5%) of the calls compared; a smaller or rarer one (say 12 ms in 1 of \
    200 calls) is a warning and does not change the exit status. Work for nobody (a service \
    that went on after its caller gave up) is an error the same way: a median of at least \
    --nobody-error-ms (100 ms) after the caller's span ended, in at least --nobody-error-percent \
    (5%) of the service's calls. Else 4 when there was nothing to \
    judge (an empty input, no span that could be read, or no span with a deadline attribute or \
    header or a caller to time it against: the report says which); else 3 \
    when some input could not be read (grouped by kind, with a count and the first examples); \
    else 0. 2 is a usage error.\n\nWith --listen ADDR it is an OTLP/HTTP receiver (POST \
    /v1/traces, application/x-protobuf or application/json, gzip or not): point an SDK's or a \
    Collector's otlphttp exporter at http://ADDR/v1/traces; it reports on SIGINT or SIGTERM \
    (and every --interval seconds) with the same exit status.\n\nWith --kafka BROKERS --topic T \
    --group G it consumes the topic an OpenTelemetry Collector's Kafka exporter writes \
    (encoding otlp_proto or otlp_json; set partition_traces_by_id: true so each trace stays on \
    one partition): run N instances in one group, each with --json, and merge their reports \
    with --merge A.json B.json ...; it reports on SIGINT or SIGTERM (and every --interval \
    seconds). Offsets are committed every second and on stopping, for records already in the \
    audit. Needs a build with the `kafka` feature.\n\nWith --merge the FILES are `--json` \
    reports of this hopbudget version; the merged report (table, --json, --html, exit status) \
    is exactly the one a single audit of all their spans gives."
)]
#[command(group(clap::ArgGroup::new("live").args(["listen", "kafka"])))]
pub struct AuditArgs {
    /// OTLP JSON trace files (one export request per line; gzip is detected); `-` reads
    /// standard input.
    #[arg(
        required_unless_present_any = ["listen", "kafka"],
        conflicts_with_all = ["listen", "kafka"]
    )]
    files: Vec<PathBuf>,
    /// The FILES are `--json` reports of several instances (`--kafka` consumers in one group,
    /// shards): merge them into one report, exactly as one audit of all their spans.
    #[arg(long, conflicts_with_all = ["listen", "kafka"])]
    merge: bool,
    /// Instead of files, receive spans over OTLP/HTTP at this address (`POST /v1/traces`,
    /// protobuf or JSON, gzip or not: what an OpenTelemetry SDK's or Collector's `otlphttp`
    /// exporter sends) and report when stopped (SIGINT, SIGTERM).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// Instead of files, consume the Kafka topic an OpenTelemetry Collector's Kafka exporter
    /// writes (`bootstrap.servers`, `host:port[,…]`), with --topic and --group; report when
    /// stopped (SIGINT, SIGTERM). Needs the `kafka` feature.
    #[arg(long, value_name = "BROKERS")]
    kafka: Option<String>,
    /// With --kafka: the topic (the exporter's default is `otlp_spans`).
    #[arg(
        long,
        value_name = "T",
        requires = "kafka",
        default_value = "otlp_spans"
    )]
    topic: String,
    /// With --kafka: the consumer group the instances share.
    #[arg(
        long,
        value_name = "G",
        requires = "kafka",
        default_value = "hopbudget-audit"
    )]
    group: String,
    /// With --kafka: a librdkafka setting, `KEY=VALUE` (repeatable), e.g.
    /// `auto.offset.reset=earliest` to read what the topic holds in a group that has no
    /// offsets yet (the default, like the Collector's receiver, starts at the end).
    #[arg(long = "kafka-config", value_name = "KEY=VALUE", requires = "kafka", value_parser = key_value)]
    kafka_config: Vec<(String, String)>,
    /// With --listen or --kafka, also report every this many seconds (the traces finished so
    /// far).
    #[arg(long, value_name = "SECS", requires = "live", value_parser = seconds)]
    interval: Option<std::time::Duration>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write an HTML page with the hop tree and the findings.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// A hop may start with this much more than its caller had left (ms) before it counts
    /// as a budget reset; absorbs millisecond rounding. (What the caller had left is
    /// measured on the caller's own clock, so skew between hosts does not matter.)
    #[arg(long, default_value_t = 2)]
    tolerance_ms: i64,
    /// Work that ended at most this many ms after the client span that called it, after the
    /// request's root span or after its deadline is not reported as late: a healthy request's
    /// spans wind down 10-30 ms after its answer on a loaded host (the last bytes, handler
    /// unwinding, span export). 0 reports every millisecond.
    #[arg(long, default_value_t = 50)]
    late_tolerance_ms: i64,
    /// A budget reset is an error (exit status 1) when the median budget it added is at
    /// least this many ms and it happened in at least --reset-error-percent of the calls;
    /// otherwise a warning.
    #[arg(long, default_value_t = 100)]
    reset_error_ms: u64,
    /// See --reset-error-ms: the least share of calls (percent, 0 to 100) of an error.
    #[arg(long, default_value_t = 5.0, value_parser = percent)]
    reset_error_percent: f64,
    /// Work for nobody (a service that went on after its caller gave up) is an error (exit
    /// status 1) when it went on by a median of at least this many ms in at least
    /// --nobody-error-percent of the service's calls; otherwise a warning.
    #[arg(long, default_value_t = 100)]
    nobody_error_ms: u64,
    /// See --nobody-error-ms: the least share of a service's calls (percent, 0 to 100).
    #[arg(long, default_value_t = 5.0, value_parser = percent)]
    nobody_error_percent: f64,
    /// Finish a trace once its root arrived and this many later spans were read.
    #[arg(long, default_value_t = 20_000)]
    settle_spans: u64,
    /// Hold at most this many spans of unfinished traces (bounds memory, ~100 bytes each).
    #[arg(long, default_value_t = 250_000)]
    max_open_spans: usize,
    /// Skip (and report) lines longer than this many bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_line_bytes: usize,
    /// Print throughput (spans per second) on standard error.
    #[arg(long)]
    stats: bool,
}

/// A whole number of seconds, at least 1.
fn seconds(s: &str) -> Result<std::time::Duration, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(std::time::Duration::from_secs(n)),
        _ => Err(format!(
            "expected a whole number of seconds, at least 1, got {s:?}"
        )),
    }
}

/// `KEY=VALUE`.
fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!(
            "expected KEY=VALUE (a librdkafka setting), got {s:?}"
        )),
    }
}

/// A percentage from 0 to 100.
fn percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("expected a percentage from 0 to 100, got {s:?}")),
    }
}

/// `hopbudget gen-traces OUT` (hidden).
#[derive(Debug, clap::Args)]
pub struct GenTracesArgs {
    /// Output file (`.gz` is written gzip-compressed).
    out: PathBuf,
    /// How many spans (rounded up to whole traces of 8 hops).
    #[arg(long, default_value_t = 1_000_000)]
    spans: u64,
    /// This service ignores inbound deadlines (a broken chain).
    #[arg(long, value_name = "SERVICE")]
    forgetful: Option<String>,
    /// Random seed.
    #[arg(long, default_value_t = 827)]
    seed: u64,
}

/// Run `hopbudget audit`; the exit status is [`Report::exit_status`](super::Report::exit_status)
/// (2 on a usage error).
pub fn audit(args: &AuditArgs) -> ExitCode {
    ExitCode::from(audit_to(args, &mut std::io::stdout().lock()))
}

/// Run `hopbudget audit` with the table or JSON written to `out` instead of standard output;
/// returns the exit status. For running the command in process: the demo's tests audit the
/// demo's traces with it.
pub fn audit_to(args: &AuditArgs, out: &mut dyn Write) -> u8 {
    let opts = AuditOptions {
        tolerance_ms: args.tolerance_ms,
        late_tolerance_ms: args.late_tolerance_ms,
        settle_spans: args.settle_spans,
        max_open_spans: args.max_open_spans,
        max_line_bytes: args.max_line_bytes,
        reset_error_ms: args.reset_error_ms,
        reset_error_percent: args.reset_error_percent,
        nobody_error_ms: args.nobody_error_ms,
        nobody_error_percent: args.nobody_error_percent,
        ..AuditOptions::default()
    };
    if let Some(addr) = args.listen {
        return listen(args, &opts, addr, out);
    }
    if let Some(brokers) = &args.kafka {
        return kafka(args, &opts, brokers, out);
    }
    if args.merge {
        return match super::report::merge::merge(&args.files, &opts) {
            Ok(report) => print_report(args, &report, out),
            Err(e) => {
                eprintln!("hopbudget: audit --merge: {e}");
                2
            }
        };
    }
    let began = Instant::now();
    let report = super::run(&args.files, &opts);
    let took = began.elapsed();
    if args.stats {
        eprintln!(
            "audited {} spans in {:.2} s: {:.0} spans/s; at most {} spans held open",
            report.input.spans,
            took.as_secs_f64(),
            report.input.spans as f64 / took.as_secs_f64().max(1e-9),
            report.grouping.peak_open_spans
        );
    }
    print_report(args, &report, out)
}

/// Print the table or JSON to `out`, write the page; the exit status.
fn print_report(args: &AuditArgs, report: &super::Report, out: &mut dyn Write) -> u8 {
    let text = if args.json {
        render::json(report) + "\n"
    } else {
        render::table(report)
    };
    // A closed pipe (`| head`) is not an audit failure.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    if let Some(path) = &args.html
        && let Err(e) = std::fs::write(path, super::report::page::html(report))
    {
        eprintln!("hopbudget: cannot write {}: {e}", path.display());
        return 2;
    }
    report.exit_status()
}

/// A report while the receiver (`--listen`, `--kafka`) runs: what came in so far (`unit`:
/// what it counts the input in), the open traces not yet audited.
fn interval_report(
    args: &AuditArgs,
    report: &super::Report,
    began: Instant,
    unit: &str,
    out: &mut dyn Write,
) {
    eprintln!(
        "hopbudget audit: report after {:.0} s ({} {unit}, {} spans so far; open traces not \
         yet audited)",
        began.elapsed().as_secs_f64(),
        report.input.requests,
        report.input.spans
    );
    let _ = print_report(args, report, out);
}

/// The report when the receiver was stopped, every trace audited; its exit status.
fn final_report(
    args: &AuditArgs,
    report: &super::Report,
    stopped: super::input::listen::Stopped,
    began: Instant,
    unit: &str,
    out: &mut dyn Write,
) -> u8 {
    eprintln!(
        "hopbudget audit: stopped by {} after {:.0} s: final report ({} {unit}, {} spans)",
        match stopped {
            super::input::listen::Stopped::Interrupt => "SIGINT",
            super::input::listen::Stopped::Terminate => "SIGTERM",
        },
        began.elapsed().as_secs_f64(),
        report.input.requests,
        report.input.spans
    );
    print_report(args, report, out)
}

/// `hopbudget audit --listen ADDR`: serve until SIGINT or SIGTERM, reporting at the
/// interval (to `out`, each report as the file path prints it) and when stopped.
fn listen(
    args: &AuditArgs,
    opts: &AuditOptions,
    addr: std::net::SocketAddr,
    out: &mut dyn Write,
) -> u8 {
    let listen = super::input::listen::ListenOptions {
        addr,
        interval: args.interval,
    };
    let began = Instant::now();
    let served = super::input::listen::serve::<super::Session>(
        opts,
        &listen,
        |bound| eprintln!("hopbudget audit: listening on http://{bound}/v1/traces (OTLP/HTTP)"),
        |report| interval_report(args, report, began, "export requests", out),
    );
    match served {
        Ok((report, stopped)) => {
            final_report(args, &report, stopped, began, "export requests", out)
        }
        Err(e) => {
            eprintln!("hopbudget: cannot listen on {addr}: {e}");
            2
        }
    }
}

/// `hopbudget audit --kafka BROKERS`: consume until SIGINT or SIGTERM, reporting at the
/// interval and when stopped.
#[cfg(feature = "kafka")]
fn kafka(args: &AuditArgs, opts: &AuditOptions, brokers: &str, out: &mut dyn Write) -> u8 {
    let kafka = super::input::kafka::KafkaOptions {
        brokers: brokers.to_owned(),
        topic: args.topic.clone(),
        group: args.group.clone(),
        interval: args.interval,
        config: args.kafka_config.clone(),
    };
    let began = Instant::now();
    let consumed = super::input::kafka::consume::<super::Session>(
        opts,
        &kafka,
        || {
            eprintln!(
                "hopbudget audit: consuming {} from {} in group {} (OTLP protobuf or JSON \
                 records, as the Collector's Kafka exporter writes them)",
                kafka.topic, kafka.brokers, kafka.group
            );
        },
        |report| interval_report(args, report, began, "records", out),
    );
    match consumed {
        Ok((report, stopped)) => final_report(args, &report, stopped, began, "records", out),
        Err(e) => {
            eprintln!("hopbudget: audit --kafka {brokers}: {e}");
            2
        }
    }
}

/// Without the `kafka` feature, `--kafka` says how to get it.
#[cfg(not(feature = "kafka"))]
fn kafka(_: &AuditArgs, _: &AuditOptions, brokers: &str, _: &mut dyn Write) -> u8 {
    eprintln!(
        "hopbudget: audit --kafka {brokers}: this hopbudget was built without Kafka support; \
         build it with the `kafka` feature (`cargo install hopbudget-cli --features kafka`, or \
         `cargo build -p hopbudget-cli --features kafka`; it builds librdkafka, which needs a C \
         compiler and make)"
    );
    2
}

/// Run `hopbudget gen-traces`.
///
/// # Errors
/// The file cannot be written, or the service is unknown.
pub fn gen_traces(args: &GenTracesArgs) -> Result<(), String> {
    let file = std::fs::File::create(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let gz = args.out.extension().is_some_and(|e| e == "gz");
    let forgetful = args.forgetful.as_deref();
    let written = if gz {
        let mut enc =
            flate2::write::GzEncoder::new(BufWriter::new(file), flate2::Compression::fast());
        super::generate::write(&mut enc, args.spans, forgetful, args.seed)
            .and_then(|n| enc.finish()?.flush().map(|()| n))
    } else {
        let mut out = BufWriter::new(file);
        super::generate::write(&mut out, args.spans, forgetful, args.seed)
            .and_then(|n| out.flush().map(|()| n))
    };
    let n = written.map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    println!("wrote {n} spans to {}", args.out.display());
    Ok(())
}
