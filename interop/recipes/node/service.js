// The recipes of docs/guide/node.md, as one runnable Node.js `http` service (standard library
// only); the page quotes them from this file and crates/hopbudget-cli/tests/fleet/recipes.rs
// runs them behind `hopbudget proxy`.
//
// Serves on 127.0.0.1:0 and prints "port N" first. Routes:
//
//   /work        work that takes 30 s, bounded by the request's budget: answers 504 when it
//                runs out.
//   /call?to=URL calls URL with fetch (URL: an --egress-to listener), carrying the trace
//                context; answers with the call's status and body.
//   /proxied?to=URL
//                calls URL with `http` through the proxy's egress named by HOPBUDGET_EGRESS
//                (host:port), carrying the trace context; answers with the call's status and
//                body.
'use strict';

const http = require('node:http');

const ANSWER_MS = 20; // kept from the budget to answer in

// The budget the proxy handed over, as a signal that fires when it is spent: before the
// proxy's own deadline, which comes only its margin later, with time left to answer.
function budget(req) {
  const ms = Number(req.headers['x-request-timeout-ms']);
  return Number.isFinite(ms)
    ? AbortSignal.timeout(Math.max(ms - ANSWER_MS, 0))
    : new AbortController().signal;
}

async function work(req, res) {
  const signal = budget(req);
  try {
    await new Promise((resolve, reject) => {
      const done = setTimeout(resolve, 30_000); // the work
      signal.addEventListener('abort', () => {
        clearTimeout(done);
        reject(signal.reason);
      });
    });
    res.end('done\n');
  } catch {
    // Say so: the budget is spent, an answer now is one the caller no longer wants.
    res.writeHead(504).end('deadline exceeded\n');
  }
}

// Node's http and fetch ignore HTTP_PROXY: `to` is the --egress-to listener for the
// destination (--egress-to 127.0.0.1:7001=inventory.internal:8080).
async function call(req, res, to) {
  const answer = await fetch(to, {
    headers: { traceparent: req.headers.traceparent }, // so the egress matches the call
    signal: budget(req),
  });
  res.writeHead(answer.status).end(await answer.text());
}

// Or name the egress as the proxy: the request in absolute form, sent to it.
function proxied(req, res, to) {
  const [host, port] = process.env.HOPBUDGET_EGRESS.split(':'); // 127.0.0.1:3128
  const out = http.get(
    {
      host,
      port,
      path: to, // http://inventory.internal:8080/stock
      headers: { host: new URL(to).host, traceparent: req.headers.traceparent },
      signal: budget(req),
    },
    (answer) => {
      res.writeHead(answer.statusCode);
      answer.pipe(res);
    },
  );
  out.on('error', (e) => res.writeHead(502).end(`${e}\n`));
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://service');
  const to = url.searchParams.get('to');
  const handle = { '/work': work, '/call': call, '/proxied': proxied }[url.pathname];
  if (!handle) return res.writeHead(404).end();
  Promise.resolve(handle(req, res, to)).catch((e) => {
    if (!res.headersSent) res.writeHead(502).end(`${e}\n`);
  });
});
server.listen(0, '127.0.0.1', () => console.log(`port ${server.address().port}`));
