//! The proxy's log lines on stderr (`--log-format`): INFO and above, as text or as one JSON
//! object a line.
//!
//! The hop's span (target `hopbudget::observe::hop`) is left out: its fields are all on the
//! `hop ended` line, and a subscriber that formats every span's fields on creation costs the
//! proxy a good part of its time per request. For the same reason the JSON lines carry no
//! span: an event's own fields, flattened to the object's top level, are the whole line, so a
//! pipeline finds `service`, `outcome` and `budget_ms` where the text line has them.
//!
//! With `spans` (`--otlp-endpoint`) the hop spans go to the layer that makes the proxy's
//! spans of them ([`Spans::layer`](super::spans::Spans::layer)), and the lines stay as they
//! are.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::Registry;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use super::log_fields::PlainFields;
use super::options::LogFormat;
use super::spans;

/// Install the proxy's subscriber; a subscriber already installed (a test's) stays.
pub(super) fn init(spans: bool, format: LogFormat) {
    let filter = Targets::new()
        .with_default(tracing::Level::INFO)
        .with_target("hopbudget::observe::hop", LevelFilter::OFF);
    if spans {
        let lines =
            lines(format).with_filter(filter.with_target(spans::INGRESS_TARGET, LevelFilter::OFF));
        let _ = tracing_subscriber::registry()
            .with(lines)
            .with(spans::Spans::layer())
            .try_init();
        return;
    }
    // A global filter over one formatter, not a per-layer one: a span nobody wants is then
    // disabled outright, and the hop skips recording into it.
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match format {
        LogFormat::Text => builder
            .fmt_fields(PlainFields)
            .finish()
            .with(filter)
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .finish()
            .with(filter)
            .try_init(),
    };
}

/// The line formatter as a layer, beside the span exporter's.
fn lines(format: LogFormat) -> Box<dyn Layer<Registry> + Send + Sync> {
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    match format {
        LogFormat::Text => Box::new(layer.fmt_fields(PlainFields)),
        LogFormat::Json => Box::new(
            layer
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false),
        ),
    }
}
