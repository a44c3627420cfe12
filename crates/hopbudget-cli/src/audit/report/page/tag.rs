//! Names on plotters' SVG output. plotters writes bare shapes (`<rect … fill="#2CA02C"/>`);
//! a reader of the page (a browser test, a stylesheet, a person's devtools) wants to know
//! which rectangle is which service. The shapes that stand for something are drawn in a fill
//! no other shape uses and in a known order, so the n-th one of that fill gets the n-th name.

use plotters::style::RGBColor;

/// How plotters' SVG backend spells a fill.
pub(super) fn fill_attr(c: RGBColor) -> String {
    format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2)
}

/// Add `attrs[n]` to the n-th `<rect` element whose fill is `fill`; the rest are left alone.
pub(super) fn rects(svg: &str, fill: RGBColor, attrs: &[String]) -> String {
    let want = fill_attr(fill);
    let mut out = String::with_capacity(svg.len() + attrs.iter().map(String::len).sum::<usize>());
    let mut rest = svg;
    let mut next = attrs.iter();
    while let Some(at) = rest.find("<rect") {
        let end = rest[at..].find('>').map_or(rest.len(), |e| at + e);
        out.push_str(&rest[..at]);
        let element = &rest[at..end];
        out.push_str("<rect");
        if element.contains(&want) {
            if let Some(a) = next.next() {
                out.push(' ');
                out.push_str(a);
            }
        }
        out.push_str(&element["<rect".len()..]);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Add attributes to the outer `<svg` element.
pub(super) fn root(svg: &str, attrs: &str) -> String {
    match svg.find("<svg") {
        Some(at) => format!("{}<svg {attrs}{}", &svg[..at], &svg[at + 4..]),
        None => svg.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_rects_of_that_fill_are_named_in_order() {
        let c = RGBColor(1, 2, 255);
        let svg = "<svg><rect fill=\"#FFFFFF\"/><rect x=\"1\" fill=\"#0102FF\"/>\
                   <circle fill=\"#0102FF\"/><rect fill=\"#0102FF\"/></svg>";
        let out = rects(svg, c, &["class=\"a\"".into(), "class=\"b\"".into()]);
        assert_eq!(
            out,
            "<svg><rect fill=\"#FFFFFF\"/><rect class=\"a\" x=\"1\" fill=\"#0102FF\"/>\
             <circle fill=\"#0102FF\"/><rect class=\"b\" fill=\"#0102FF\"/></svg>"
        );
        assert_eq!(
            root(&out, "class=\"g\"")[..19].to_owned(),
            "<svg class=\"g\"><rec"
        );
    }
}
