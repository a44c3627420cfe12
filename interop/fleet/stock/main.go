// stock: the Go net/http service of the fleet trial (S24, issue #45 item 5,
// crates/hopbudget-cli/tests/fleet/trial.rs). It sits behind its own `hopbudget proxy` and is
// written as docs/guide/go.md says a Go service should be: its work runs under a context
// bounded by the budget it was told, and a request whose budget ran out is answered 504,
// never Go's implicit empty 200.
//
// Usage:
//
//	stock
//	    Serves on 127.0.0.1:0; the first line printed is "port N". Route:
//	    /stock[?slow=1]  prints "stock told=MS" (what x-request-timeout-ms said, or "none"),
//	                     then answers "in stock" at once, or with slow=1 works for 5 s in
//	                     10 ms steps and, when its context ends first, prints
//	                     "stock stopped after=MS err=ERR" and answers 504.
//
// Standard library only; the test builds it with GO111MODULE=off into the target dir.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// answerMs is kept from the budget to answer in: the proxy's own deadline comes only its
// margin after the service's.
const answerMs = 20

func stock(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	told := r.Header.Get("x-request-timeout-ms")
	if told == "" {
		told = "none"
	}
	fmt.Printf("stock told=%s\n", told)
	if ms, err := strconv.Atoi(told); err == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms-answerMs)*time.Millisecond)
		defer cancel()
	}
	if r.URL.Query().Get("slow") == "1" {
		for i := 0; i < 500; i++ {
			select {
			case <-ctx.Done():
				fmt.Printf("stock stopped after=%d err=%v\n", time.Since(start).Milliseconds(), ctx.Err())
				// Say so: an implicit 200 would record the hop as completed.
				http.Error(w, "deadline exceeded", http.StatusGatewayTimeout)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		fmt.Println("stock finished")
	}
	fmt.Fprintln(w, "in stock")
}

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	fmt.Printf("port %d\n", listener.Addr().(*net.TCPAddr).Port)
	http.HandleFunc("/stock", stock)
	if err := http.Serve(listener, nil); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
