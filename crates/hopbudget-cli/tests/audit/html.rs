//! `hopbudget audit --html`: the page has its pictures (#50 item 10), read without a browser.
//! The call graph has one node per service, coloured by what it does with the budget, and an
//! edge label per call edge; each service with durations has a histogram, a spike at a default
//! timeout marked; work for nobody is drawn as bars; each finding that names a trace links to
//! an anchor for it. `scripts/check-report.sh` renders the same pages in headless Chromium.

use std::collections::BTreeMap;
use std::path::PathBuf;

use hopbudget_cli::audit::{self, AuditOptions, Report};

/// The S7 checkout graph, generated; `forgetful` ignores the deadline it is handed.
fn generated(forgetful: Option<&str>) -> Report {
    let mut traces = Vec::new();
    audit::generate::write(&mut traces, 8_000, forgetful, 827).unwrap();
    audit::run_reader("gen.jsonl", &traces[..], &AuditOptions::default())
}

/// Plain OpenTelemetry (Python SDK): the seeds' incident, nothing propagated.
fn plain_otel() -> Report {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/otel-python/plain-otel.jsonl.gz");
    audit::run(&[path], &AuditOptions::default())
}

/// Every `prefix…"` value in `page`, in order.
fn values<'a>(page: &'a str, prefix: &str) -> Vec<&'a str> {
    page.split(prefix)
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect()
}

/// The call graph's `<svg>` element.
fn graph(page: &str) -> &str {
    let start = page
        .find("<svg class=\"call-graph\"")
        .expect("a call graph");
    &page[start..start + page[start..].find("</svg>").unwrap()]
}

/// The call graph's nodes: service to colour class.
fn nodes(page: &str) -> BTreeMap<String, String> {
    graph(page)
        .split("<rect class=\"node node-")
        .skip(1)
        .map(|rest| {
            let class = &rest[..rest.find('"').unwrap()];
            let service = values(rest, "data-service=\"")[0];
            (service.to_owned(), class.to_owned())
        })
        .collect()
}

/// The texts of the call graph's edge labels.
fn edge_labels(page: &str) -> Vec<String> {
    graph(page)
        .split("<text")
        .skip(1)
        .map(|t| {
            t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()]
                .trim()
                .to_owned()
        })
        .filter(|t| t.ends_with("ms left") || t == "no deadline" || t.starts_with("ignored"))
        .collect()
}

/// The `<figure>` of one service's histogram.
fn histogram<'a>(page: &'a str, service: &str) -> &'a str {
    let start = page
        .find(&format!("id=\"durations-{service}\""))
        .unwrap_or_else(|| panic!("no histogram of {service}"));
    &page[start..start + page[start..].find("</figure>").unwrap()]
}

/// Each finding's trace link points at an anchor that names that trace.
fn links_reach_their_traces(page: &str, r: &Report) {
    let links = values(page, "href=\"#trace-");
    let named: Vec<&str> = r
        .findings
        .iter()
        .filter_map(|f| f.example_trace.as_deref())
        .collect();
    assert_eq!(links, named, "one link per finding with a trace, in order");
    assert!(!named.is_empty());
    for t in named {
        let anchor = format!("<li class=\"trace\" id=\"trace-{t}\">trace <code>{t}</code>");
        assert!(page.contains(&anchor), "no anchor for trace {t}");
    }
}

/// Self-contained: no script, nothing fetched.
fn self_contained(page: &str) {
    for tag in [
        "<script",
        "<img",
        "<iframe",
        "<link",
        "src=\"",
        "href=\"http",
    ] {
        assert!(!page.contains(tag), "{tag} in the page");
    }
}

#[test]
fn a_clean_chain_is_drawn_all_forwarding_with_the_budget_on_each_edge() {
    let r = generated(None);
    let page = audit::page::html(&r);
    self_contained(&page);
    let nodes = nodes(&page);
    assert_eq!(nodes.len(), 8, "{nodes:?}");
    assert!(nodes.values().all(|c| c == "forwards"), "{nodes:?}");
    let labels = edge_labels(&page);
    assert_eq!(labels.len(), 7, "{labels:?}");
    assert!(labels.iter().all(|l| l.ends_with(" ms left")), "{labels:?}");
    // One histogram per service, the graph, no work for nobody to draw.
    assert_eq!(page.matches("<svg").count(), 1 + 8, "{page}");
    assert_eq!(page.matches("<svg class=\"histogram\"").count(), 8);
    assert!(
        !page.contains("class=\"spike\""),
        "a spike marked on a clean chain"
    );
    assert!(!page.contains("nobody-bars"));
    assert!(page.contains("<h2 id=\"hop-tree\">Hop tree (per route)</h2><ul class=\"tree\"><li>"));
}

#[test]
fn a_forgetful_hop_is_drawn_resetting_with_its_spike_marked_and_its_trace_linked() {
    let r = generated(Some("inventory"));
    let page = audit::page::html(&r);
    self_contained(&page);
    let nodes = nodes(&page);
    assert_eq!(nodes.len(), 8, "{nodes:?}");
    for (service, class) in &nodes {
        let want = if service == "inventory" {
            "resets"
        } else {
            "forwards"
        };
        assert_eq!(class, want, "{service}: {nodes:?}");
    }
    let labels = edge_labels(&page);
    assert_eq!(labels.len(), 7, "{labels:?}");
    assert!(
        labels.contains(&"ignored: own budget".to_owned()),
        "{labels:?}"
    );
    // Below the reset, the callee is told what the forgetful hop's own 2 s budget left.
    assert!(
        labels.iter().any(|l| l
            .trim_end_matches(" ms left")
            .parse::<u64>()
            .is_ok_and(|v| v > 1_500)),
        "{labels:?}"
    );
    let inv = histogram(&page, "inventory");
    let spikes = values(inv, "data-spikes-ms=\"")[0];
    let spike: u64 = spikes.parse().unwrap();
    assert!((1_900..=2_000).contains(&spike), "{spikes}");
    assert_eq!(inv.matches("<polyline class=\"spike\"").count(), 1, "{inv}");
    assert!(
        inv.contains(&format!("{spike} ms")),
        "the spike's value is written by it"
    );
    links_reach_their_traces(&page, &r);
}

#[test]
fn plain_opentelemetry_draws_the_incident_and_no_empty_hop_tree() {
    let r = plain_otel();
    let page = audit::page::html(&r);
    self_contained(&page);
    let nodes = nodes(&page);
    let want: BTreeMap<String, String> = [
        ("browser", "forwards"),
        ("gateway", "resets"),
        ("orchestrator", "forwards"),
        ("inventory", "forwards"),
    ]
    .into_iter()
    .map(|(s, c)| (s.to_owned(), c.to_owned()))
    .collect();
    assert_eq!(nodes, want);
    // What each callee was told, as the headers say: 800, 5000, 2000 ms.
    assert_eq!(
        edge_labels(&page),
        ["800 ms left", "5000 ms left", "2000 ms left"],
        "{}",
        graph(&page)
    );
    // The orchestrator's and the gateway's 504s at its 2 s default; the inventory's 3 s.
    for (service, lo, hi) in [
        ("gateway", 2_000, 2_020),
        ("orchestrator", 2_000, 2_020),
        ("inventory", 2_990, 3_010),
    ] {
        let h = histogram(&page, service);
        let spike: u64 = values(h, "data-spikes-ms=\"")[0].parse().unwrap();
        assert!((lo..=hi).contains(&spike), "{service}: {spike}");
        assert_eq!(h.matches("<polyline class=\"spike\"").count(), 1, "{h}");
    }
    // Work for nobody: one bar per service, the gateway's and the inventory's not empty.
    let bars = values(&page, "class=\"nobody-bar\" data-service=\"");
    assert_eq!(bars, ["browser", "gateway", "orchestrator", "inventory"]);
    let ms: Vec<u64> = values(&page, "data-ms=\"")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(ms[1] > 5_000 && ms[3] > 5_000 && ms[0] == 0, "{ms:?}");
    links_reach_their_traces(&page, &r);
    assert!(
        !page.contains("Hop tree"),
        "a hop tree heading with no hop spans"
    );
    assert_eq!(page.matches("<svg").count(), 1 + 3 + 1);
}

/// One request: `caller`'s server span, its client span, `callee`'s server span below it.
fn two_services(caller: &str, callee: &str) -> String {
    let name = |s: &str| serde_json::to_string(s).unwrap();
    let span = |id: u32, parent: u32, kind: u8, end_ms: u64| {
        let parent = if parent == 0 {
            String::new()
        } else {
            format!(r#""parentSpanId":"{parent:016x}","#)
        };
        format!(
            r#"{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"{id:016x}",{parent}"name":"GET /","kind":{kind},"startTimeUnixNano":"1000000000","endTimeUnixNano":"{}"}}"#,
            1_000_000_000 + end_ms * 1_000_000
        )
    };
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":{}}}}}]}},"scopeSpans":[{{"spans":[{},{}]}}]}},{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":{}}}}}]}},"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        name(caller),
        span(1, 0, 2, 30),
        span(2, 1, 3, 20),
        name(callee),
        span(3, 2, 2, 400),
    ) + "\n"
}

#[test]
fn service_names_are_written_as_text_never_as_markup() {
    let hostile = "<img src=x onerror=alert(1)>";
    let r = audit::run_reader(
        "t.jsonl",
        two_services(hostile, "b\"><script>x</script>").as_bytes(),
        &AuditOptions::default(),
    );
    let page = audit::page::html(&r);
    self_contained(&page);
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{page}"
    );
    let nodes = nodes(&page);
    assert_eq!(nodes.len(), 2, "{nodes:?}");
}

#[test]
fn services_with_no_deadline_in_or_out_are_drawn_grey_with_an_unlabelled_budget() {
    let r = audit::run_reader(
        "t.jsonl",
        two_services("front", "back").as_bytes(),
        &AuditOptions::default(),
    );
    let page = audit::page::html(&r);
    let want: BTreeMap<String, String> = [("front", "no-deadline"), ("back", "no-deadline")]
        .into_iter()
        .map(|(s, c)| (s.to_owned(), c.to_owned()))
        .collect();
    assert_eq!(nodes(&page), want);
    assert_eq!(edge_labels(&page), ["no deadline"]);
    // The callee went on 380 ms after its caller had given up: one bar.
    assert_eq!(values(&page, "data-ms=\""), ["0", "380"]);
}
