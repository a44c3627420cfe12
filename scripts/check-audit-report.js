// What scripts/check-report.sh asks of `hopbudget audit --html`'s page once Chromium has laid
// it out (#50 item 10). Injected into a copy of the page after a line `const EXPECT = {...};`
// (the page itself has no script); writes the failures, as JSON, into <pre id="audit-check">.
//
// EXPECT: nodes {service: class}, edges (how many labels), spikes [service], histograms (how
// many), nobody [service with work for nobody], traces (whether findings link traces).
(function () {
  const fail = [];
  const box = (el) => el.getBoundingClientRect();
  const shown = (el) => {
    const b = box(el);
    return b.width > 0 && b.height > 0;
  };
  const inside = (b, outer) =>
    b.left >= outer.left - 1 && b.right <= outer.right + 1 &&
    b.top >= outer.top - 1 && b.bottom <= outer.bottom + 1;

  // The call graph: one node per service, of the expected class, its name written on it.
  const graph = document.querySelector("svg.call-graph");
  if (!graph || !shown(graph)) {
    fail.push("no call graph laid out");
  } else {
    const rects = graph.querySelectorAll("rect.node");
    const want = Object.keys(EXPECT.nodes);
    if (rects.length !== want.length) {
      fail.push(`call graph: ${rects.length} nodes, expected ${want.length}`);
    }
    const texts = [...graph.querySelectorAll("text")];
    const fills = {};
    for (const service of want) {
      const cls = EXPECT.nodes[service];
      const rect = graph.querySelector(`rect.node-${cls}[data-service="${service}"]`);
      if (!rect) {
        fail.push(`call graph: no node-${cls} for ${service}`);
        continue;
      }
      if (!shown(rect)) fail.push(`call graph: ${service}'s node has no size`);
      const fill = getComputedStyle(rect).fill;
      if (fills[cls] && fills[cls] !== fill) fail.push(`call graph: node-${cls} in two colours`);
      fills[cls] = fill;
      const name = texts.find((t) => t.textContent.trim() === service);
      if (!name || !inside(box(name), box(rect))) {
        fail.push(`call graph: ${service}'s name is not written on its node`);
      }
    }
    const colours = Object.values(fills);
    if (new Set(colours).size !== colours.length) {
      fail.push(`call graph: two classes share a colour ${JSON.stringify(fills)}`);
    }
    const labels = texts.filter((t) =>
      /ms left$|^no deadline$|^ignored/.test(t.textContent.trim()) && shown(t));
    if (labels.length !== EXPECT.edges) {
      fail.push(`call graph: ${labels.length} edge labels, expected ${EXPECT.edges}`);
    }
    for (const legend of ["forwards the deadline", "resets it", "drops it", "no deadline in or out"]) {
      if (!texts.some((t) => t.textContent.includes(legend) && shown(t))) {
        fail.push(`call graph: no legend entry "${legend}"`);
      }
    }
  }

  // Durations: a histogram per service, the spike line drawn inside it where expected.
  const histograms = document.querySelectorAll("svg.histogram");
  if (histograms.length !== EXPECT.histograms) {
    fail.push(`${histograms.length} histograms, expected ${EXPECT.histograms}`);
  }
  for (const fig of document.querySelectorAll("figure.duration")) {
    const service = fig.dataset.service;
    const line = fig.querySelector("polyline.spike");
    const svg = fig.querySelector("svg.histogram");
    if (!svg || !shown(svg)) fail.push(`histogram of ${service} not laid out`);
    if (EXPECT.spikes.includes(service)) {
      if (!line || box(line).height < 50 || !inside(box(line), box(svg))) {
        fail.push(`histogram of ${service}: no spike marked`);
      }
      const ms = fig.dataset.spikesMs;
      if (!ms || ![...svg.querySelectorAll("text")].some((t) => t.textContent.trim() === `${ms} ms`)) {
        fail.push(`histogram of ${service}: the spike's value is not written`);
      }
    } else if (line) {
      fail.push(`histogram of ${service}: a spike marked where none is expected`);
    }
  }

  // Work for nobody: a bar per service, with height where there was some.
  const bars = [...document.querySelectorAll("rect.nobody-bar")];
  for (const service of EXPECT.nobody) {
    const bar = bars.find((b) => b.dataset.service === service);
    if (!bar || !shown(bar)) fail.push(`work for nobody: no bar for ${service}`);
  }
  if (EXPECT.nobody.length === 0 && bars.length > 0) {
    fail.push("work for nobody: bars where there was none");
  }

  // Findings link to anchors that name their traces.
  const links = [...document.querySelectorAll("a.trace-link")];
  if (EXPECT.traces && links.length === 0) fail.push("no finding links a trace");
  for (const a of links) {
    const id = a.getAttribute("href").slice(1);
    const target = document.getElementById(id);
    const trace = a.querySelector("code").textContent;
    if (!target || !target.textContent.includes(trace)) {
      fail.push(`link to ${id}: no anchor naming trace ${trace}`);
    }
  }

  // Self-contained, and no heading over nothing.
  if (document.scripts.length !== 1) fail.push(`${document.scripts.length - 1} scripts in the page`);
  if (document.querySelector("[src], link")) fail.push("the page fetches something");
  for (const h of document.querySelectorAll("h2")) {
    const next = h.nextElementSibling;
    if (!next || next.tagName === "H2" || next.tagName === "SCRIPT" || !shown(next)) {
      fail.push(`heading "${h.textContent}" with nothing beneath it`);
    }
  }

  const out = document.createElement("pre");
  out.id = "audit-check";
  out.textContent = JSON.stringify(fail);
  document.body.appendChild(out);
})();
