// A Go net/http service for hopbudget's sidecar tests (crates/hopbudget-cli/tests/fleet/go.rs):
// it reports on stdout what its handler lives through, so a test can see that the proxy in
// front of it ends its request at the deadline (rule C25, issue #37).
//
// Usage:
//
//	go_http_service
//	    Serves on 127.0.0.1:0; the first line printed is "port N". Routes:
//	    /wait   prints "arrived x-request-timeout-ms=V", then waits for r.Context() to end
//	            (printing "cancelled err=ERR") or 30 s (printing "finished", answering 200).
//	    /ok     answers "ok".
//	    /forward?to=URL[&keep=1]
//	            prints "arrived x-request-timeout-ms=V", calls URL under r.Context() with the
//	            inbound `traceparent` (as a service whose tracing library propagates it) but,
//	            without keep=1, no deadline: a service that forgets its deadline (S13). With
//	            keep=1 it forwards its inbound x-request-timeout-ms as it is. Answers with the
//	            call's status and body.
//
// Standard library only; the test builds it with GO111MODULE=off into the target dir.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	fmt.Printf("port %d\n", listener.Addr().(*net.TCPAddr).Port)
	mux := http.NewServeMux()
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("arrived x-request-timeout-ms=%s\n", r.Header.Get("x-request-timeout-ms"))
		select {
		case <-r.Context().Done():
			// Go cancels the context when the connection closes (HTTP/1.1) or the stream is
			// reset (HTTP/2): what the proxy does at the deadline.
			fmt.Printf("cancelled err=%v\n", r.Context().Err())
		case <-time.After(30 * time.Second):
			fmt.Println("finished")
			fmt.Fprintln(w, "finished")
		}
	})
	mux.HandleFunc("/forward", func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("arrived x-request-timeout-ms=%s\n", r.Header.Get("x-request-timeout-ms"))
		call, err := http.NewRequestWithContext(r.Context(), "GET", r.URL.Query().Get("to"), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		call.Header.Set("traceparent", r.Header.Get("traceparent"))
		if r.URL.Query().Get("keep") == "1" {
			call.Header.Set("x-request-timeout-ms", r.Header.Get("x-request-timeout-ms"))
		}
		res, err := http.DefaultClient.Do(call)
		if err != nil {
			fmt.Printf("forward failed err=%v\n", err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		fmt.Printf("forwarded status=%d\n", res.StatusCode)
		w.WriteHeader(res.StatusCode)
		io.Copy(w, res.Body)
	})
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	})
	if err := http.Serve(listener, mux); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
