// One service of the demo's checkout call graph (crates/hopbudget-demo/topologies/checkout.yaml),
// written in Go to run behind `hopbudget proxy`: examples/proxy_checkout.sh and
// crates/hopbudget-cli/tests/fleet/checkout.rs start eight of them, each behind its own proxy,
// to show the deadline contract kept across services that do not link hopbudget (rule C25,
// issue #37 item 3).
//
// Usage:
//
//	checkout_node -name NAME [-listen 127.0.0.1:0] [-work-ms N] [-slow-ms N]
//	              [-egress HOST:PORT] [-forget] [-call URL]...
//
// Every request, whatever its path: the node does its own work (-work-ms; -slow-ms instead
// when the query says slow=NAME, to make the budget run out here), then calls each -call URL
// in parallel with the inbound query, all under r.Context(), which Go cancels when the proxy
// in front closes the connection (at the deadline, or when the caller left). Its calls carry
// the inbound trace id in a `traceparent` with a span id of their own, as an
// OpenTelemetry-instrumented service sends it, and its remaining budget in
// x-request-timeout-ms, unless -forget: a service that drops its deadline (S13). They go
// through the HTTP proxy -egress names (default: $HTTP_PROXY), its proxy's --egress, which
// restates the request's remaining budget on them even when the node forgot it.
//
// It answers 200 when its work and every call succeeded; 504 when a call was answered 504
// (the deadline ran out below), 502 for another failure. A call's URL ends with the name of
// the service it reaches (http://127.0.0.1:PORT/pricing), which names it in the node's line. It prints "port N" once it listens,
// then one line per request when the request ends:
//
//	hop name=NAME trace=TRACE_ID told=MS forgot=BOOL outcome=OUTCOME status=STATUS [err=ERR]
//
// told: the x-request-timeout-ms it was told ("none" without one). outcome: "ok",
// "child-failed" (a call failed; status is what the node answered), "cancelled" (its
// r.Context() ended and stopped its work or its calls; status=0, nothing was answered), or
// "late" (it did all its work, but its request had ended meanwhile: what a service that does
// not watch its context does).
//
// Standard library only; built with GO111MODULE=off, as the other programs under interop/.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type calls []string

func (c *calls) String() string { return strings.Join(*c, ",") }

func (c *calls) Set(value string) error {
	u, err := url.Parse(value)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("%q is not an http://HOST:PORT/PATH URL", value)
	}
	*c = append(*c, value)
	return nil
}

type node struct {
	name   string
	work   time.Duration
	slow   time.Duration
	forget bool
	calls  []string
	client *http.Client
	out    sync.Mutex
}

func main() {
	var n node
	var children calls
	flag.StringVar(&n.name, "name", "", "the service's name (required)")
	listen := flag.String("listen", "127.0.0.1:0", "where to listen")
	work := flag.Int("work-ms", 0, "the node's own work per request, in ms")
	slow := flag.Int("slow-ms", 5000, "its work instead, in ms, when the query says slow=NAME")
	egress := flag.String("egress", "", "HOST:PORT of the HTTP proxy for the node's calls (default: $HTTP_PROXY)")
	flag.BoolVar(&n.forget, "forget", false, "send no deadline on the node's calls (S13)")
	flag.Var(&children, "call", "a URL to call per request (repeatable), through the egress proxy")
	flag.Parse()
	if n.name == "" || flag.NArg() > 0 || *work < 0 || *slow < 0 {
		fmt.Fprintln(os.Stderr, "checkout_node: -name is required; -work-ms and -slow-ms are >= 0; no arguments besides flags")
		flag.Usage()
		os.Exit(2)
	}
	n.work = time.Duration(*work) * time.Millisecond
	n.slow = time.Duration(*slow) * time.Millisecond
	n.calls = children

	proxy := *egress
	if proxy == "" {
		proxy = os.Getenv("HTTP_PROXY")
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 16}
	if proxy != "" {
		if !strings.Contains(proxy, "://") {
			proxy = "http://" + proxy
		}
		u, err := url.Parse(proxy)
		if err != nil || u.Host == "" {
			fmt.Fprintf(os.Stderr, "checkout_node: -egress %q is not HOST:PORT\n", *egress)
			os.Exit(2)
		}
		// Explicitly, not http.ProxyFromEnvironment: that one skips loopback destinations,
		// and every service here is on loopback.
		transport.Proxy = http.ProxyURL(u)
	}
	n.client = &http.Client{Transport: transport}

	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "checkout_node %s: listen on %s: %v\n", n.name, *listen, err)
		os.Exit(1)
	}
	fmt.Printf("port %d\n", listener.Addr().(*net.TCPAddr).Port)
	if err := http.Serve(listener, &n); err != nil {
		fmt.Fprintf(os.Stderr, "checkout_node %s: serve: %v\n", n.name, err)
		os.Exit(1)
	}
}

func (n *node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	told := r.Header.Get("x-request-timeout-ms")
	if told == "" {
		told = "none"
	}
	trace := traceID(r.Header.Get("traceparent"))
	status, stopped, err := n.handle(r, arrived, trace)
	outcome := "ok"
	switch {
	case stopped:
		// The proxy in front closed the connection and Go cancelled r.Context(): the node
		// stopped its work or its calls there. Nothing can be answered any more.
		outcome, status = "cancelled", 0
	case r.Context().Err() != nil:
		// Done, but its request had ended meanwhile: work nobody waited for.
		outcome = "late"
	case status != http.StatusOK:
		outcome = "child-failed"
	}
	line := fmt.Sprintf("hop name=%s trace=%s told=%s forgot=%t outcome=%s status=%d",
		n.name, trace, told, n.forget, outcome, status)
	if err != nil {
		line += " err=" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	n.out.Lock()
	fmt.Println(line)
	n.out.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s %s\n", n.name, outcome)
	}
}

// handle does the node's work and its calls: the status to answer, whether it stopped
// because r.Context() ended, and what went wrong.
func (n *node) handle(r *http.Request, arrived time.Time, trace string) (int, bool, error) {
	ctx := r.Context()
	work := n.work
	for _, name := range r.URL.Query()["slow"] {
		if name == n.name {
			work = n.slow
		}
	}
	select {
	case <-time.After(work):
	case <-ctx.Done():
		return 0, true, ctx.Err()
	}
	results := make(chan callResult, len(n.calls))
	for _, target := range n.calls {
		go func(target string) {
			results <- n.call(ctx, r, arrived, trace, target)
		}(target)
	}
	status, failure := http.StatusOK, error(nil)
	for range n.calls {
		var result callResult
		select {
		case result = <-results:
		case <-ctx.Done():
			// Its calls were made under ctx: they are being abandoned too.
			return 0, true, ctx.Err()
		}
		switch {
		case result.err != nil && status == http.StatusOK:
			status, failure = http.StatusBadGateway, result.err
		case result.status == http.StatusGatewayTimeout:
			status, failure = http.StatusGatewayTimeout, result.failure()
		case result.status != http.StatusOK && result.err == nil && status == http.StatusOK:
			status, failure = http.StatusBadGateway, result.failure()
		}
	}
	if status != http.StatusOK && ctx.Err() != nil {
		// A call failed because the request it belongs to ended (its proxy's egress answers
		// 499 once the request is cancelled, racing Go's own notice of it).
		return 0, true, ctx.Err()
	}
	return status, false, failure
}

type callResult struct {
	target  string
	status  int
	outcome string // the answer's x-deadline-outcome, set by a hopbudget proxy
	err     error
}

// failure names the service called (the last segment of its URL's path) and its answer.
func (c callResult) failure() error {
	name := c.target
	if u, err := url.Parse(c.target); err == nil {
		name = u.Path[strings.LastIndex(u.Path, "/")+1:]
	}
	if c.outcome != "" {
		return fmt.Errorf("call to %s answered %d (x-deadline-outcome: %s)", name, c.status, c.outcome)
	}
	return fmt.Errorf("call to %s answered %d", name, c.status)
}

func (n *node) call(ctx context.Context, r *http.Request, arrived time.Time, trace, target string) callResult {
	u := target
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return callResult{target: target, err: err}
	}
	req.Header.Set("traceparent", "00-"+trace+"-"+randomHex(8)+"-01")
	if ms, err := strconv.Atoi(r.Header.Get("x-request-timeout-ms")); err == nil && !n.forget {
		left := ms - int(time.Since(arrived)/time.Millisecond)
		if left < 0 {
			left = 0
		}
		req.Header.Set("x-request-timeout-ms", strconv.Itoa(left))
	}
	res, err := n.client.Do(req)
	if err != nil {
		return callResult{target: target, err: err}
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return callResult{target: target, status: res.StatusCode, outcome: res.Header.Get("x-deadline-outcome")}
}

// traceID is the trace id of a W3C traceparent, or a new one (a root span) without a valid one.
func traceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) == 4 && len(parts[1]) == 32 && parts[1] != strings.Repeat("0", 32) {
		if _, err := hex.DecodeString(parts[1]); err == nil {
			return strings.ToLower(parts[1])
		}
	}
	return randomHex(16)
}

func randomHex(bytes int) string {
	b := make([]byte, bytes)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
