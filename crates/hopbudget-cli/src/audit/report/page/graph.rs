//! The call graph as the seeds draw it: services left to right by how deep they sit, an
//! arrow per caller-to-callee edge labelled with what the callee was told on arrival
//! ("480 ms left"), each service filled by what it does with the budget, and a legend.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::escape::esc;
use super::tag;
use crate::audit::report::pictures::{Handling, Pictures};

const NODE_W: i32 = 180;
const NODE_H: i32 = 34;
const COL: i32 = 270;
const ROW: i32 = 72;
const MARGIN: i32 = 24;
const LEGEND_H: i32 = 56;

/// The fill of each kind of service: a node is the only rectangle of its fill.
pub(super) fn color(h: Handling) -> RGBColor {
    match h {
        Handling::Forwards => RGBColor(116, 196, 118),
        Handling::Resets => RGBColor(222, 45, 38),
        Handling::Drops => RGBColor(253, 174, 97),
        Handling::NoDeadline => RGBColor(189, 189, 189),
    }
}

fn legend_text(h: Handling) -> &'static str {
    match h {
        Handling::Forwards => "forwards the deadline",
        Handling::Resets => "resets it (tells more than it had)",
        Handling::Drops => "drops it (calls without one)",
        Handling::NoDeadline => "no deadline in or out",
    }
}

fn err(e: impl std::fmt::Display) -> String {
    format!("call graph: {e}")
}

/// The drawing, as inline SVG. Each node's `<rect>` carries `class="node node-HANDLING"` and
/// `data-service`; the `<svg>` carries `class="call-graph"`.
pub(super) fn svg(p: &Pictures) -> Result<String, String> {
    let columns = p.services.iter().map(|s| s.layer).max().unwrap_or(0) as i32 + 1;
    let handling: std::collections::HashMap<&str, Handling> = p
        .services
        .iter()
        .map(|s| (s.service.as_str(), s.handling))
        .collect();
    let mut at = std::collections::HashMap::new();
    for s in &p.services {
        let x = MARGIN + s.layer as i32 * COL;
        let y = MARGIN + s.row as i32 * ROW;
        at.insert(s.service.as_str(), (x, y));
    }
    let tallest = p
        .services
        .iter()
        .map(|s| s.row as i32 + 1)
        .max()
        .unwrap_or(1);
    let width = (MARGIN * 2 + (columns - 1) * COL + NODE_W).max(900) as u32;
    let height = (MARGIN * 2 + (tallest - 1) * ROW + NODE_H + LEGEND_H) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let edge_color = RGBColor(90, 90, 90);
        let label_font = ("sans-serif", 15)
            .into_font()
            .color(&RGBColor(40, 40, 40))
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        for e in &p.edges {
            let (Some(&(x0, y0)), Some(&(x1, y1))) =
                (at.get(e.caller.as_str()), at.get(e.callee.as_str()))
            else {
                continue;
            };
            let from = (x0 + NODE_W, y0 + NODE_H / 2);
            let to = (x1, y1 + NODE_H / 2);
            root.draw(&PathElement::new(
                vec![from, to],
                edge_color.stroke_width(2),
            ))
            .map_err(err)?;
            // The arrowhead, pointing along the edge.
            let (dx, dy) = ((to.0 - from.0) as f64, (to.1 - from.1) as f64);
            let len = (dx * dx + dy * dy).sqrt().max(1.0);
            let (ux, uy) = (dx / len, dy / len);
            let back = (to.0 as f64 - 10.0 * ux, to.1 as f64 - 10.0 * uy);
            let head = vec![
                to,
                ((back.0 - 5.0 * uy) as i32, (back.1 + 5.0 * ux) as i32),
                ((back.0 + 5.0 * uy) as i32, (back.1 - 5.0 * ux) as i32),
            ];
            root.draw(&Polygon::new(head, edge_color.filled()))
                .map_err(err)?;
            let label = match (e.told_p50_ms, handling.get(e.callee.as_str())) {
                (Some(ms), _) => format!("{ms} ms left"),
                // The callee's spans say where its budget came from: not from this caller.
                (None, Some(Handling::Resets)) => "ignored: own budget".to_owned(),
                (None, _) => "no deadline".to_owned(),
            };
            // Nearer the callee than the caller: edges fanning out of one caller part there.
            let mid = (
                from.0 + (to.0 - from.0) * 3 / 5,
                from.1 + (to.1 - from.1) * 3 / 5 - 3,
            );
            root.draw(&Text::new(label, mid, label_font.clone()))
                .map_err(err)?;
        }
        let name_font = ("sans-serif", 17)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Center));
        for s in &p.services {
            let (x, y) = at[s.service.as_str()];
            root.draw(&Rectangle::new(
                [(x, y), (x + NODE_W, y + NODE_H)],
                color(s.handling).filled(),
            ))
            .map_err(err)?;
            root.draw(&Rectangle::new(
                [(x, y), (x + NODE_W, y + NODE_H)],
                RGBColor(60, 60, 60).stroke_width(1),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                s.service.clone(),
                (x + NODE_W / 2, y + NODE_H / 2),
                name_font.clone(),
            ))
            .map_err(err)?;
        }
        // The legend: circles, so that no legend swatch is taken for a node.
        let y = height as i32 - LEGEND_H / 2 - 6;
        let legend_font = ("sans-serif", 15).into_font().color(&BLACK);
        let mut x = MARGIN;
        for h in Handling::ALL {
            root.draw(&Circle::new((x + 6, y), 6, color(h).filled()))
                .map_err(err)?;
            root.draw(&Text::new(
                legend_text(h),
                (x + 16, y - 7),
                legend_font.clone(),
            ))
            .map_err(err)?;
            x += 24 + 7 * legend_text(h).len() as i32;
        }
        root.draw(&Text::new(
            "edge label: median budget told on arrival",
            (MARGIN, y + 12),
            legend_font.clone(),
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    // Name the nodes: one fill per handling, drawn in the services' order.
    for h in Handling::ALL {
        let names: Vec<String> = p
            .services
            .iter()
            .filter(|s| s.handling == h)
            .map(|s| {
                format!(
                    "class=\"node node-{}\" data-service=\"{}\"",
                    h.name(),
                    esc(&s.service)
                )
            })
            .collect();
        svg = tag::rects(&svg, color(h), &names);
    }
    Ok(tag::root(&svg, "class=\"call-graph\""))
}
