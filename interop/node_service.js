// A Node.js service (the `http` module) for hopbudget's sidecar tests
// (crates/hopbudget-cli/tests/fleet/polyglot.rs): it reports on stdout what its handler lives
// through, so a test can see that `hopbudget proxy` in front of it restates the budget and
// ends its request at the deadline (rule C25, issue #37).
//
// Usage:
//   node node_service.js
//       Serves HTTP/1.1 on 127.0.0.1:0; the first line printed is "port N". Routes:
//       /wait  prints "arrived x-request-timeout-ms=V", then works for 30 s, ignoring the
//              budget on purpose. When the connection is closed before it answers, the
//              response's 'close' event fires unfinished: it stops its work and prints
//              "cancelled by=close"; otherwise "finished" and 200.
//       /ok    answers "ok".
//       /forward?to=URL
//              prints "arrived x-request-timeout-ms=V", then calls URL with the inbound
//              `traceparent` (as a service whose tracing propagates it) and no deadline: a
//              service that forgets its own, as most do. It does not abort the call when its
//              caller goes away. Prints "forwarded status=N" and answers with the call's
//              status and body (crates/hopbudget-cli/tests/fleet/check_interop.rs).
//
// Node's own modules only.
'use strict';

const http = require('http');

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://service');
  if (url.pathname === '/ok') {
    res.end('ok');
    return;
  }
  if (url.pathname === '/forward') {
    forward(req, res, url.searchParams.get('to'));
    return;
  }
  if (url.pathname !== '/wait') {
    res.statusCode = 404;
    res.end('not found\n');
    return;
  }
  console.log(`arrived x-request-timeout-ms=${req.headers['x-request-timeout-ms'] || ''}`);
  const work = setTimeout(() => {
    console.log('finished');
    res.end('finished\n');
  }, 30000);
  // req and res both emit 'close' when the connection goes away (the proxy closed it at the
  // deadline, or its caller left), but also after a normal answer: the response's 'close'
  // before it finished is the one that means "stop".
  res.on('close', () => {
    if (!res.writableFinished) {
      clearTimeout(work);
      console.log('cancelled by=close');
    }
  });
});

function forward(req, res, to) {
  console.log(`arrived x-request-timeout-ms=${req.headers['x-request-timeout-ms'] || ''}`);
  const headers = {};
  if (req.headers.traceparent) {
    headers.traceparent = req.headers.traceparent;
  }
  const call = http.get(to, { headers }, (answer) => {
    const body = [];
    answer.on('data', (chunk) => body.push(chunk));
    answer.on('end', () => {
      console.log(`forwarded status=${answer.statusCode}`);
      res.statusCode = answer.statusCode;
      res.end(Buffer.concat(body));
    });
  });
  call.on('error', (e) => {
    console.log(`forward failed err=${e.message}`);
    if (!res.writableEnded) {
      res.statusCode = 502;
      res.end(`${e.message}\n`);
    }
  });
}

server.listen(0, '127.0.0.1', () => {
  console.log(`port ${server.address().port}`);
});
