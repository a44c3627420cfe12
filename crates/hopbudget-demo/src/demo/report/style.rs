//! The stylesheet of the demo's HTML pages, the report and the step page alike, below both.

/// The CSS every page inlines.
pub(super) const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;\
color:#222}table.figures{border-collapse:collapse;margin:1em 0;font-size:14px}\
table.figures th,table.figures td{border:1px solid #ddd;padding:3px 8px}\
table.figures td{text-align:right;font-variant-numeric:tabular-nums}\
table.figures th{text-align:left;background:#f6f6f6;font-weight:normal}\
table.figures thead th{font-weight:bold;text-align:center}\
table.figures tr.sub th{padding-left:2em;color:#555}\
table.hops td{min-width:4em}table.hops td.mode{text-align:left;color:#555}figure{margin:1.5em 0}.legend span{margin-right:1.2em;\
font-size:13px}.finding{background:#fff4e5;padding:.5em 1em}ul.notes{font-size:13px;color:#444}";
