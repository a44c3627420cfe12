// web: the Node gateway of the fleet trial (S24, issue #45 item 5,
// crates/hopbudget-cli/tests/fleet/trial.rs), behind its own `hopbudget proxy`. It is traced
// with the OpenTelemetry SDK for Node (@opentelemetry/sdk-node and the http instrumentation),
// which continues the trace its sidecar hands over and puts `traceparent` on its outbound
// calls. Node's `http` ignores HTTP_PROXY, so it calls orders at its sidecar's --egress-to
// listener, as docs/guide/node.md says. It forwards no deadline itself, as a service adopting
// through the sidecar starts out: its sidecar finds the request each call belongs to by that
// trace context, and tells orders what is left.
//
// Serves on 127.0.0.1:0 and prints "port N" first. Environment: ORDERS_AT (HOST:PORT, the
// --egress-to listener for orders), OTEL_SERVICE_NAME and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// (read by the SDK). Route: /checkout[?slow=1] prints "web told=MS", calls orders' /orders
// under a timeout of what is left of its budget, and answers with orders' status and body. SIGTERM flushes
// the spans still batched, then exits.
const { NodeSDK } = require('@opentelemetry/sdk-node');
const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto');

const sdk = new NodeSDK({
  traceExporter: new OTLPTraceExporter(),
  instrumentations: [new HttpInstrumentation()],
});
sdk.start();

// Required after the SDK started, so that the instrumentation wraps it.
const http = require('http');

const ORDERS_AT = process.env.ORDERS_AT;

const server = http.createServer((req, res) => {
  const start = Date.now();
  const told = req.headers['x-request-timeout-ms'];
  console.log(`web told=${told === undefined ? 'none' : told}`);
  const budget = Number.parseInt(told ?? '1000', 10);
  const left = () => Math.max(0, budget - (Date.now() - start));
  const query = req.url.includes('slow=1') ? '?slow=1' : '';
  const call = http.get(
    `http://${ORDERS_AT}/orders${query}`,
    { timeout: left() },
    (answer) => {
      const chunks = [];
      answer.on('data', (c) => chunks.push(c));
      answer.on('end', () => {
        res.writeHead(answer.statusCode, { 'content-type': 'text/plain' });
        res.end(Buffer.concat(chunks));
      });
    },
  );
  call.on('timeout', () => call.destroy(new Error('budget spent')));
  call.on('error', (e) => {
    if (!res.headersSent) {
      res.writeHead(504, { 'content-type': 'text/plain' });
      res.end(`orders: ${e.message}\n`);
    }
  });
});

server.listen(0, '127.0.0.1', () => console.log(`port ${server.address().port}`));

process.on('SIGTERM', () => {
  // Its sidecar keeps idle connections open: close them rather than wait them out.
  server.close();
  server.closeAllConnections();
  sdk.shutdown().finally(() => process.exit(0));
});
