// A Go client that reaches a service over TLS: `net/http` with a CA file, as a Go service
// calls an HTTPS neighbour. It sends one GET with a budget in `x-request-timeout-ms` and
// prints the protocol it negotiated (ALPN: HTTP/2.0 when the server offers h2), the status
// and the body, one `key=value` per line, for `hopbudget-cli`'s proxy tests (#46 item 7).
//
// Usage: go_tls_client URL CA_FILE BUDGET_MS
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go_tls_client URL CA_FILE BUDGET_MS")
		os.Exit(2)
	}
	url, caFile, budget := os.Args[1], os.Args[2], os.Args[3]
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "no certificate in", caFile)
		os.Exit(2)
	}
	client := &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: true,
		},
		Timeout: 10 * time.Second,
	}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	req.Header.Set("x-request-timeout-ms", budget)
	res, err := client.Do(req)
	if err != nil {
		fmt.Println("error=" + err.Error())
		os.Exit(1)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Printf("proto=%s\nstatus=%d\n%s", res.Proto, res.StatusCode, body)
}
