//! The HTML page `hopbudget audit --html FILE` writes: what people would rather look at than
//! read. The call graph between services as the seeds draw it (`graph`), each service's
//! durations with a spike at a default timeout marked and the work done for nobody
//! (`charts`), the findings linked to the traces that show them, the rollout map and the
//! tables. Self-contained: inline SVG drawn with plotters, inline CSS, no script.

mod charts;
mod escape;
mod graph;
mod tag;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use super::render::{rollout_cells, severity, table};
use super::{Finding, Forwards, Report, TreeEdge};
use escape::esc;

/// The rollout map as an HTML table (a service with no deadline inbound or outbound is
/// marked, one partly there too).
fn rollout_html(r: &Report) -> String {
    if r.rollout.is_empty() {
        return "<p>No service seen.</p>".to_owned();
    }
    let mut t = String::from(
        "<table class=\"rollout\"><tr><th>service</th><th>inbound</th><th>with deadline</th>\
         <th>forwards</th><th>refused</th><th>late</th></tr>",
    );
    for s in &r.rollout {
        let (with, forwards) = rollout_cells(s);
        let class = match (s.inbound_deadline_share, s.forwards) {
            (Some(x), _) if x < 1.0 => " class=\"partial\"",
            (_, Forwards::None | Forwards::Some) => " class=\"partial\"",
            _ => "",
        };
        let _ = write!(
            t,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.service),
            s.inbound,
            esc(&with),
            esc(&forwards),
            s.refused,
            s.late
        );
    }
    t.push_str("</table>");
    t
}

/// The hop tree per route (calls and resets on each edge, a reset edge in red), from hop
/// spans' `deadline.*` attributes; `None` when there were none (plain OpenTelemetry), so
/// that no heading stands over nothing.
fn hop_tree(r: &Report) -> Option<String> {
    if r.tree.is_empty() && r.roots.is_empty() {
        return None;
    }
    let mut children: HashMap<&str, Vec<&TreeEdge>> = HashMap::new();
    for e in &r.tree {
        children.entry(e.parent.as_str()).or_default().push(e);
    }
    let flagged: HashSet<&str> = r.findings.iter().map(|f| f.hop.as_str()).collect();
    fn node(
        out: &mut String,
        name: &str,
        note: &str,
        reset: bool,
        children: &HashMap<&str, Vec<&TreeEdge>>,
        flagged: &HashSet<&str>,
        path: &mut Vec<String>,
    ) {
        let class = if reset {
            " class=\"reset\""
        } else if flagged.contains(name) {
            " class=\"flag\""
        } else {
            ""
        };
        let _ = write!(out, "<li><span{class}>{}</span> {}", esc(name), esc(note));
        if path.iter().any(|p| p == name) || path.len() > 32 {
            out.push_str(" (cycle)</li>");
            return;
        }
        if let Some(kids) = children.get(name) {
            path.push(name.to_owned());
            out.push_str("<ul>");
            for e in kids {
                let note = if e.resets > 0 {
                    format!("{} calls, {} budget resets (S13)", e.calls, e.resets)
                } else {
                    format!("{} calls", e.calls)
                };
                node(out, &e.child, &note, e.resets > 0, children, flagged, path);
            }
            out.push_str("</ul>");
            path.pop();
        }
        out.push_str("</li>");
    }
    let mut tree = String::from("<ul class=\"tree\">");
    for (root, n) in &r.roots {
        node(
            &mut tree,
            root,
            &format!("{n} traces"),
            false,
            &children,
            &flagged,
            &mut Vec::new(),
        );
    }
    tree.push_str("</ul>");
    Some(tree)
}

/// The findings, each an anchor (`finding-N`), each linking to the trace that shows it.
fn findings_html(r: &Report) -> String {
    let mut out = String::new();
    if let Some(why) = &r.nothing_to_judge {
        let _ = write!(out, "<p><b>{}</b></p>", esc(why));
        return out;
    }
    if r.findings.is_empty() {
        out.push_str("<p>No findings.</p>");
        return out;
    }
    out.push_str("<ol class=\"findings\">");
    for (i, f) in r.findings.iter().enumerate() {
        let trace = f.example_trace.as_deref().map_or_else(String::new, |t| {
            format!(
                " <a class=\"trace-link\" href=\"#trace-{t}\">trace <code>{t}</code></a>",
                t = esc(t)
            )
        });
        let _ = write!(
            out,
            "<li id=\"finding-{}\" class=\"{}\"><b>{}</b> {}{trace}</li>",
            i + 1,
            severity(f.severity).to_lowercase(),
            severity(f.severity),
            esc(&f.detail)
        );
    }
    out.push_str("</ol>");
    out
}

/// One anchor per trace a finding names (`trace-ID`), with its id to look up in a trace
/// viewer and links back to the findings it shows. The audit keeps no trace (its memory is
/// per hop), so the id is what it can give.
fn traces_html(findings: &[Finding]) -> Option<String> {
    let mut by_trace: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in findings.iter().enumerate() {
        if let Some(t) = &f.example_trace {
            by_trace.entry(t.as_str()).or_default().push(i + 1);
        }
    }
    if by_trace.is_empty() {
        return None;
    }
    let mut out = String::from(
        "<p>Each trace below shows a finding above; look it up by its id in your trace viewer \
         (Jaeger, Tempo, Zipkin).</p><ul class=\"traces\">",
    );
    for (t, ids) in by_trace {
        let links: Vec<String> = ids
            .iter()
            .map(|i| format!("<a href=\"#finding-{i}\">finding {i}</a>"))
            .collect();
        let _ = write!(
            out,
            "<li class=\"trace\" id=\"trace-{t}\">trace <code>{t}</code> shows {}</li>",
            links.join(", "),
            t = esc(t)
        );
    }
    out.push_str("</ul>");
    Some(out)
}

/// A drawing, or why there is none (plotters failed: the page says so rather than failing).
fn drawn(svg: Result<String, String>) -> String {
    svg.unwrap_or_else(|e| format!("<p class=\"error\">could not draw: {}</p>", esc(&e)))
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:90em}\
    .tree li{margin:.2em 0}table.rollout td,table.rollout th{padding:.2em .8em;\
    text-align:right}table.rollout td:first-child{text-align:left}.partial{color:#a60}\
    .reset{color:#b00;font-weight:bold}.flag{color:#a60}li.error{color:#b00}\
    pre{background:#f6f6f6;padding:1em;overflow:auto}figure{margin:1em 0}\
    .durations{display:flex;flex-wrap:wrap;gap:1em}.durations figure{margin:0}\
    figure svg{max-width:100%;height:auto}:target{background:#ffec99}\
    figcaption{font-size:.9em;color:#444}";

/// A self-contained HTML page (see the module's documentation).
pub fn html(r: &Report) -> String {
    let p = &r.pictures;
    let mut body = String::from("<h1>hopbudget audit</h1>");
    body.push_str("<h2 id=\"call-graph\">Call graph</h2>");
    if p.services.is_empty() {
        body.push_str("<p>No service seen.</p>");
    } else {
        let _ = write!(
            body,
            "<figure class=\"call-graph\">{}<figcaption>Each edge is labelled with the median \
             budget the callee was told on arrival; each service is coloured by what it does \
             with the budget it is handed.</figcaption></figure>",
            drawn(graph::svg(p))
        );
    }
    body.push_str("<h2 id=\"findings\">Findings</h2>");
    body.push_str(&findings_html(r));
    if let Some(traces) = traces_html(&r.findings) {
        let _ = write!(body, "<h2 id=\"traces\">Traces that show them</h2>{traces}");
    }
    let with_durations: Vec<_> = p
        .services
        .iter()
        .filter(|s| !s.durations.is_empty())
        .collect();
    if !with_durations.is_empty() {
        body.push_str(
            "<h2 id=\"durations\">Durations per service</h2><p>How long each service's \
             requests lasted. A red line marks a spike at one value far above the median: a \
             default timeout firing where a deadline should have been.</p>\
             <div class=\"durations\">",
        );
        for s in with_durations {
            let spikes: Vec<String> = s.spikes_ms.iter().map(u64::to_string).collect();
            let caption = if spikes.is_empty() {
                "no spike".to_owned()
            } else {
                format!("spike at {} ms marked", spikes.join(", "))
            };
            let _ = write!(
                body,
                "<figure class=\"duration\" id=\"durations-{svc}\" data-service=\"{svc}\" \
                 data-spikes-ms=\"{}\">{}<figcaption>{svc}: {caption}</figcaption></figure>",
                spikes.join(" "),
                drawn(charts::durations(s)),
                svc = esc(&s.service),
            );
        }
        body.push_str("</div>");
    }
    body.push_str("<h2 id=\"nobody\">Work for nobody</h2>");
    if p.services.iter().any(|s| s.for_nobody_ms > 0) {
        let _ = write!(
            body,
            "<p>Time each service's server spans went on after the client span that called \
             them had ended: the caller had given up.</p><figure class=\"nobody\">{}</figure>",
            drawn(charts::nobody(&p.services))
        );
    } else {
        body.push_str(
            "<p>None: no server span went on after the caller that called it had given up.</p>",
        );
    }
    let _ = write!(body, "<h2>Rollout map</h2>{}", rollout_html(r));
    if let Some(tree) = hop_tree(r) {
        let _ = write!(body, "<h2 id=\"hop-tree\">Hop tree (per route)</h2>{tree}");
    }
    let _ = write!(body, "<h2>Tables</h2><pre>{}</pre>", esc(&table(r)));
    if r.problems_total > 0 {
        let _ = write!(
            body,
            "<h2>Could not read ({} problems)</h2><ul>",
            r.problems_total
        );
        for k in &r.problem_kinds {
            let _ = write!(body, "<li>{} &times; {}<ul>", k.count, esc(&k.kind));
            for p in &k.examples {
                let _ = write!(body, "<li><code>{}</code></li>", esc(&p.to_string()));
            }
            body.push_str("</ul></li>");
        }
        body.push_str("</ul>");
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>hopbudget audit</title>\
         <style>{STYLE}</style></head><body>{body}</body></html>\n"
    )
}
