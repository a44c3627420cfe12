// The recipes of docs/guide/go.md, as one runnable Go net/http service; the page quotes
// them from this file and crates/hopbudget-cli/tests/fleet/recipes.rs runs them behind
// `hopbudget proxy`.
//
// Serves on 127.0.0.1:0 and prints "port N" first. Routes:
//
//	/work   work that takes 30 s, bounded by the request's budget: answers 504 when it runs out.
//	/call?to=URL
//	        calls URL through the proxy's egress (HTTP_PROXY, for every destination), carrying
//	        the inbound trace context; answers with the call's status and body.
//
// Standard library only; the test builds it with GO111MODULE=off into the target dir.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// budget turns the proxy's x-request-timeout-ms into the request context's deadline.
func budget(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ms, err := strconv.Atoi(r.Header.Get("x-request-timeout-ms")); err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
			defer cancel()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

func work(w http.ResponseWriter, r *http.Request) {
	select {
	case <-time.After(30 * time.Second):
		fmt.Fprintln(w, "done")
	case <-r.Context().Done():
		// Say so: returning without writing would send Go's implicit 200.
		http.Error(w, "deadline exceeded", http.StatusGatewayTimeout)
	}
}

// The proxy's egress, set explicitly: Go's default transport skips HTTP_PROXY for
// localhost and loopback destinations.
var egress = &http.Client{Transport: &http.Transport{
	Proxy: func(*http.Request) (*url.URL, error) {
		return url.Parse(os.Getenv("HTTP_PROXY")) // e.g. http://127.0.0.1:3128
	},
}}

func call(w http.ResponseWriter, r *http.Request) {
	out, err := http.NewRequestWithContext(r.Context(), "GET", r.URL.Query().Get("to"), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// What otelhttp's transport does: the inbound trace context goes on the call, so the
	// egress matches it to this request.
	out.Header.Set("traceparent", r.Header.Get("traceparent"))
	res, err := egress.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	w.WriteHeader(res.StatusCode)
	io.Copy(w, res.Body)
}

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	fmt.Printf("port %d\n", listener.Addr().(*net.TCPAddr).Port)
	mux := http.NewServeMux()
	mux.HandleFunc("/work", work)
	mux.HandleFunc("/call", call)
	if err := http.Serve(listener, budget(mux)); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
