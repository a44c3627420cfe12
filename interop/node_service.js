// A Node.js service (the `http` module) for hopbudget's sidecar tests
// (crates/hopbudget-cli/tests/proxy_polyglot.rs): it reports on stdout what its handler lives
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

server.listen(0, '127.0.0.1', () => {
  console.log(`port ${server.address().port}`);
});
