//! The fields of the proxy's log lines, written as tracing-subscriber's default formatter
//! writes them (`name=value`, strings quoted, the message bare) but without its per-field
//! `Debug` round trips: a string that needs no escaping is copied as it is. The `hop ended`
//! line is written once per request (issue #37 item 4), so its cost is the proxy's cost.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The proxy's field formatter; see the module documentation.
pub(crate) struct PlainFields;

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Plain {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Plain<'a> {
    writer: Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl Plain<'_> {
    /// The field's `name=` (after a space unless first), or nothing for the message.
    fn start(&mut self, field: &Field) -> bool {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return false;
        }
        if !self.first {
            self.result = self.writer.write_char(' ');
        }
        self.first = false;
        if name != "message" {
            let name = name.strip_prefix("r#").unwrap_or(name);
            self.result = self
                .result
                .and_then(|()| self.writer.write_str(name))
                .and_then(|()| self.writer.write_char('='));
        }
        self.result.is_ok()
    }
}

/// Whether `{:?}` of `value` is `value` in quotes: printable ASCII, no quote, no backslash.
fn needs_no_escape(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for Plain<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.start(field) {
            return;
        }
        self.result = if field.name() == "message" {
            self.writer.write_str(value)
        } else if needs_no_escape(value) {
            self.writer
                .write_char('"')
                .and_then(|()| self.writer.write_str(value))
                .and_then(|()| self.writer.write_char('"'))
        } else {
            write!(self.writer, "{value:?}")
        };
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.start(field) {
            self.result = write!(self.writer, "{value}");
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.start(field) {
            self.result = write!(self.writer, "{value}");
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.start(field) {
            self.result = self.writer.write_str(if value { "true" } else { "false" });
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.start(field) {
            self.result = write!(self.writer, "{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The lines the default formatter and this one write for the same events.
    fn lines(plain: bool) -> String {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let make = move || Sink(sink.clone());
        let builder = tracing_subscriber::fmt()
            .with_writer(make)
            .with_ansi(false)
            .without_time();
        let emit = || {
            let route = "GET /a";
            tracing::info!(route = %route, outcome = "ok", odd = "é\n", quoted = "say \"hi\"", slash = "a\\b", n = 7u64,
                           i = -3i64, b = true, missing = Option::<u16>::None, "hop ended");
            tracing::warn!(error = %"boom", "accept failed");
        };
        if plain {
            tracing::subscriber::with_default(builder.fmt_fields(PlainFields).finish(), emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), emit);
        }
        let bytes = out.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_lines_are_the_default_formatters_lines() {
        let plain = lines(true);
        assert!(
            plain.contains("hop ended route=GET /a outcome=\"ok\" odd="),
            "{plain}"
        );
        assert_eq!(plain, lines(false));
    }
}
