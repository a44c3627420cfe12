// A Node.js `http` client for hopbudget's early-answer test (crates/hopbudget/tests/http/early_answer_clients.rs, S14).
//
// Usage: node node_early_refusal.js URL TIMEOUT_MS BODY_BYTES ROUNDS [keep-alive]
//
// Each round POSTs to URL with `x-request-timeout-ms: TIMEOUT_MS`, sends the headers at once,
// writes the BODY_BYTES body only 20 ms later (as a browser or a proxy streaming an upload
// does), and records either the response status or the socket error. One connection per
// round, or one kept-alive agent's connections with `keep-alive`. Prints one JSON line: {"status": {"503": n, ...}, "error": {"EPIPE": n, ...}}.
'use strict';
const http = require('http');

const [url, timeoutMs, bodyBytes, rounds, keepAlive] = process.argv.slice(2);
const agent = keepAlive === 'keep-alive' ? new http.Agent({ keepAlive: true, maxSockets: 1 }) : false;
const body = Buffer.alloc(Number(bodyBytes), 'x');
const tally = { status: {}, error: {} };
const count = (m, k) => { m[k] = (m[k] || 0) + 1; };

function round() {
  return new Promise((resolve) => {
    let settled = false;
    const done = (fn) => { if (!settled) { settled = true; fn(); resolve(); } };
    const req = http.request(url, {
      method: 'POST',
      agent,
      headers: {
        'x-request-timeout-ms': timeoutMs,
        'content-type': 'application/octet-stream',
        'content-length': body.length,
      },
    });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => done(() => count(tally.status, String(res.statusCode))));
      res.on('error', (e) => done(() => count(tally.error, e.code || e.message)));
    });
    req.on('error', (e) => done(() => count(tally.error, e.code || e.message)));
    req.flushHeaders();
    setTimeout(() => {
      req.write(body, () => {});
      req.end();
    }, 20);
  });
}

(async () => {
  for (let i = 0; i < Number(rounds); i++) {
    await round();
  }
  console.log(JSON.stringify(tally));
  if (agent) agent.destroy();
})();
