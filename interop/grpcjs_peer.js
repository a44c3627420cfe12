// A @grpc/grpc-js (Node.js) peer for hopbudget's gRPC interop test (crates/hopbudget/tests/grpc/peer_grpcjs.rs):
// a second gRPC implementation beside grpcio, with a deadline handling of its own.
//
// Usage:
//   node grpcjs_peer.js client ADDR METHOD REQUEST_HEX TIMEOUT_MS
//       Calls METHOD on ADDR with the raw request bytes and a grpc-js deadline TIMEOUT_MS from
//       now, then prints one JSON line:
//       {"code": "OK" | status name, "reply_hex": ..., "details": ..., "trailers": {...}}.
//   node grpcjs_peer.js server METHOD SLEEP_MS
//       Serves METHOD on 127.0.0.1:0 (the port is printed on the first line); each call waits
//       SLEEP_MS, then answers empty bytes with trailing metadata `x-time-remaining-ms`: what
//       grpc-js's call.getDeadline() left when the call arrived (`none` without a deadline).
//
// `require('@grpc/grpc-js')` is found through NODE_PATH (the test sets it).
'use strict';
const grpc = require('@grpc/grpc-js');

const raw = (b) => b;

function trailers(metadata) {
  const out = {};
  if (!metadata) return out;
  for (const [k, v] of Object.entries(metadata.getMap())) out[k] = String(v);
  return out;
}

function client(addr, method, requestHex, timeoutMs) {
  const c = new grpc.Client(addr, grpc.credentials.createInsecure());
  let status = null;
  let result = null;
  let printed = false;
  // The callback and the 'status' event come in either order; print once both are here.
  const done = () => {
    if (!status || !result || printed) return;
    printed = true;
    const out = { ...result, trailers: trailers(status.metadata) };
    console.log(JSON.stringify(out));
    c.close();
  };
  const call = c.makeUnaryRequest(
    method, raw, raw, Buffer.from(requestHex, 'hex'), new grpc.Metadata(),
    { deadline: Date.now() + Number(timeoutMs) },
    (err, reply) => {
      result = err
        ? { code: grpc.status[err.code], reply_hex: '', details: err.details }
        : { code: 'OK', reply_hex: reply.toString('hex'), details: '' };
      done();
    });
  call.on('status', (s) => { status = s; done(); });
}

function server(method, sleepMs) {
  const srv = new grpc.Server();
  const definition = {
    Call: {
      path: method, requestStream: false, responseStream: false,
      requestSerialize: raw, requestDeserialize: raw,
      responseSerialize: raw, responseDeserialize: raw,
    },
  };
  srv.addService(definition, {
    Call: (call, callback) => {
      const deadline = call.getDeadline();
      const at = deadline instanceof Date ? deadline.getTime() : Number(deadline);
      const ms = Number.isFinite(at) ? String(Math.floor(at - Date.now())) : 'none';
      const md = new grpc.Metadata();
      md.set('x-time-remaining-ms', ms);
      setTimeout(() => callback(null, Buffer.alloc(0), md), Number(sleepMs));
    },
  });
  srv.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) { console.error(err); process.exit(1); }
    console.log(port);
  });
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'client') client(...args);
else if (mode === 'server') server(...args);
else { console.error('usage: grpcjs_peer.js client|server ...'); process.exit(2); }
