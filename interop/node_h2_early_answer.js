// A Node.js `http2` client for hopbudget's early-answer test (crates/hopbudget/tests/http/early_answer_clients.rs,
// C18 over HTTP/2).
//
// Usage: node node_h2_early_answer.js URL PATH TIMEOUT_MS BODY_BYTES DELAY_MS ROUNDS
//
// One HTTP/2 session (prior knowledge, cleartext) carries ROUNDS requests, one after another:
// each POSTs to PATH with `x-request-timeout-ms: TIMEOUT_MS` and writes its BODY_BYTES body
// DELAY_MS after the headers. The server may answer before it read the body and then reset the
// stream with RST_STREAM(NO_ERROR) (RFC 9113, section 8.1); the client keeps the answer, and the
// session must carry the next round. Records each round's status, or its error. Prints one JSON
// line: {"status": {"503": n, ...}, "error": {"<code>": n, ...}}.
'use strict';
const http2 = require('http2');

const [url, path, timeoutMs, bodyBytes, delayMs, rounds] = process.argv.slice(2);
const body = Buffer.alloc(Number(bodyBytes), 'x');
const tally = { status: {}, error: {} };
const count = (m, k) => { m[k] = (m[k] || 0) + 1; };

function round(session) {
  return new Promise((resolve) => {
    let status;
    let settled = false;
    const done = (fn) => { if (!settled) { settled = true; fn(); resolve(); } };
    const req = session.request({
      ':method': 'POST',
      ':path': path,
      'x-request-timeout-ms': timeoutMs,
      'content-type': 'application/octet-stream',
    });
    req.on('response', (headers) => { status = headers[':status']; });
    req.on('data', () => {});
    req.on('end', () => done(() => count(tally.status, String(status))));
    req.on('error', (e) => done(() => count(tally.error, e.code || e.message)));
    req.setTimeout(10000, () => done(() => { count(tally.error, 'TIMEOUT'); req.close(); }));
    setTimeout(() => {
      if (!req.closed) {
        req.end(body);
      }
    }, Number(delayMs));
  });
}

async function main() {
  const session = http2.connect(url);
  session.on('error', (e) => count(tally.error, `session ${e.code || e.message}`));
  for (let i = 0; i < Number(rounds); i++) {
    if (session.closed || session.destroyed) {
      count(tally.error, 'session closed');
      continue;
    }
    await round(session);
  }
  session.close();
  console.log(JSON.stringify(tally));
}

main();
