// A Go net/http service for hopbudget's sidecar tests (crates/hopbudget-cli/tests/proxy_go.rs):
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
//
// Standard library only; the test builds it with GO111MODULE=off into the target dir.
package main

import (
	"fmt"
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
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	})
	if err := http.Serve(listener, mux); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
