//! The request log of `hopbudget-demo serve` and of the demo's services: one line per hop,
//! written when the library's `hop` span closes, with the fields the span carries (C14): the
//! budget at arrival and where it came from, and the terminal status. The line comes from the
//! library's own span, so hops the server layer answers before any handler (refusals,
//! malformed headers) are logged too.
//!
//! ```text
//! hop service=reco-scorer route=/hopbudget.demo.Hop/Call protocol=grpc budget_ms=100 source=grpc-timeout outcome=refused required_ms=180 took_ms=0.2
//! ```
//!
//! With `--log-format json` ([`LogFormat::Json`]) the same fields as one JSON object, for a log
//! pipeline, `message` in place of the leading word ([`write_line`]):
//!
//! ```text
//! {"message":"hop","service":"reco-scorer","route":"/hopbudget.demo.Hop/Call","protocol":"grpc","budget_ms":100,"source":"grpc-timeout","outcome":"refused","required_ms":180,"took_ms":0.2}
//! ```

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, span};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The span fields the line shows, in order, with the name they get in the line.
const FIELDS: &[(&str, &str)] = &[
    ("service.name", "service"),
    ("otel.name", "route"),
    ("hop.protocol", "protocol"),
    ("deadline.remaining_ms", "budget_ms"),
    ("deadline.source", "source"),
    ("deadline.outcome", "outcome"),
    ("deadline.required_ms", "required_ms"),
    ("deadline.overrun_ms", "overrun_ms"),
];

/// How `serve` writes its hop lines (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `hop name=value ...`
    #[default]
    Text,
    /// One JSON object a line, the same fields.
    Json,
}

/// Print one hop line to stdout: `hop` then `name=value` for each field in `fields`, or, as
/// JSON, an object with `message` `hop` and the fields, in order. A value that reads as a
/// number is a JSON number, `true` and `false` booleans, `none` null; the rest strings.
pub fn write_line(format: LogFormat, fields: &[(&str, String)]) {
    let line = match format {
        LogFormat::Text => {
            let mut line = String::from("hop");
            for (name, value) in fields {
                let _ = write!(line, " {name}={value}");
            }
            line
        }
        LogFormat::Json => {
            // Written by hand, key by key: serde_json's map sorts its keys, and the line keeps
            // the text line's order.
            let mut line = String::from(r#"{"message":"hop""#);
            for (name, value) in fields {
                let _ = write!(
                    line,
                    ",{}:{}",
                    serde_json::Value::from(*name),
                    json_value(value)
                );
            }
            line.push('}');
            line
        }
    };
    // One write per line, so lines from concurrent hops never interleave.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A text value as the JSON value a pipeline wants; see [`write_line`].
fn json_value(value: &str) -> serde_json::Value {
    use serde_json::Value;
    if let Ok(n) = value.parse::<u64>() {
        return Value::from(n);
    }
    if let Ok(n) = value.parse::<i64>() {
        return Value::from(n);
    }
    match value {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "none" => Value::Null,
        _ => value
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map_or_else(|| Value::from(value), Value::from),
    }
}

/// A `tracing` layer that prints one line per closed `hop` span to stdout.
#[derive(Debug, Default)]
pub struct HopLog {
    format: LogFormat,
}

impl HopLog {
    /// A layer writing its lines in `format`.
    pub fn new(format: LogFormat) -> Self {
        Self { format }
    }
}

#[derive(Debug)]
struct Fields {
    values: [Option<String>; FIELDS.len()],
    opened: Instant,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}").trim_matches('"').to_owned());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.to_string());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.to_string());
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        if let Some(i) = FIELDS.iter().position(|(name, _)| *name == field.name()) {
            self.values[i] = Some(value);
        }
    }

    fn line(&self) -> Vec<(&'static str, String)> {
        let mut line: Vec<(&str, String)> = FIELDS
            .iter()
            .zip(&self.values)
            .filter_map(|((_, shown), value)| Some((*shown, value.clone()?)))
            .collect();
        line.push((
            "took_ms",
            format!("{:.1}", self.opened.elapsed().as_secs_f64() * 1000.0),
        ));
        line
    }
}

impl<S> Layer<S> for HopLog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "hop" {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields {
            values: Default::default(),
            opened: Instant::now(),
        };
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &span::Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        if let Some(fields) = span.extensions().get::<Fields>() {
            write_line(self.format, &fields.line());
        }
    }
}
