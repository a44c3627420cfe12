//! Text put into the page, escaped for HTML: the page's tables and the charts' and the graph's
//! labels all go through it, so it sits below them.

/// `s` with the characters HTML gives a meaning to written as entities.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
