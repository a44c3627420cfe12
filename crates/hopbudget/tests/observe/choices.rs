//! Rule C14 for the choices made at the bottom of the stack: a degraded path and a cache
//! read record what they chose on their span (`degrade.choice`, `cache.choice`), inside the
//! request's hop span.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopbudget::cache::{CacheChoice, CacheReads};
use hopbudget::degrade::{Choice, Degrade};
use hopbudget::{HopPolicy, RequestBudget};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

type Fields = BTreeMap<String, String>;

/// Every span's name and fields, as created and as recorded later.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(Id, String, Fields)>>>);

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.to_string());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Collect(&mut fields));
        let name = attrs.metadata().name().to_string();
        self.0.lock().unwrap().push((id.clone(), name, fields));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, _, fields)) = spans.iter_mut().find(|(i, _, _)| i == id) {
            values.record(&mut Collect(fields));
        }
    }
}

impl Capture {
    fn spans(&self, name: &str) -> Vec<Fields> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(_, n, _)| n == name)
            .map(|(_, _, f)| f.clone())
            .collect()
    }
}

fn budget(ms: u64) -> RequestBudget {
    RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT)
}

#[tokio::test(start_paused = true)]
async fn a_degraded_path_records_its_choice_on_its_span() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let d = Degrade::new("reco-scorer", "/score", "stale-model");
    let full = Duration::from_millis(180);
    for left in [500, 120] {
        let (choice, _) = d
            .run(&budget(left), full, || async { 1 }, || async { 2 })
            .await;
        assert_eq!(choice == Choice::Full, left == 500);
    }
    let spans = capture.spans("degrade");
    assert_eq!(spans.len(), 2);
    let choices: Vec<&str> = spans.iter().map(|f| f["degrade.choice"].as_str()).collect();
    assert_eq!(choices, ["full", "cheap"]);
    assert_eq!(spans[1]["degrade.path"], "stale-model");
    assert_eq!(spans[1]["deadline.remaining_ms"], "120");
    assert_eq!(spans[1]["degrade.full_cost_ms"], "180");
}

#[tokio::test(start_paused = true)]
async fn a_cache_read_records_its_choice_on_its_span() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let reads = CacheReads::new("catalog", "prices");
    let span = reads.span("price:42", &budget(80), Duration::from_millis(250));
    reads.record(&span, CacheChoice::Stale);
    let spans = capture.spans("cache.read");
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0]["cache.choice"], "stale");
    assert_eq!(spans[0]["cache.name"], "prices");
    assert_eq!(spans[0]["cache.recompute_cost_ms"], "250");
}
