// A Go net/http client for hopbudget's early-answer test (crates/hopbudget/tests/http/early_answer_clients.rs, S14).
//
// Usage: go_early_answer URL TIMEOUT_MS BODY_BYTES ROUNDS AGENT FRAMING DELAY_MS PIECES
//
// Each round POSTs to URL with `x-request-timeout-ms: TIMEOUT_MS`. The transport sends the
// headers at once and the BODY_BYTES body in PIECES equal pieces, each DELAY_MS after the
// last, as an upload streamed from a slow source is sent. AGENT is `fresh` (one connection
// per round) or `keep-alive` (one reused connection); FRAMING is `length` (Content-Length) or
// `chunked`. Prints one JSON line: {"status": {"503": n, ...}, "error": {"<error text>": n}}.
//
// Standard library only.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func number(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "not a number: %q\n", s)
		os.Exit(2)
	}
	return n
}

func main() {
	if len(os.Args) != 9 {
		fmt.Fprintln(os.Stderr, "usage: go_early_answer URL TIMEOUT_MS BODY_BYTES ROUNDS fresh|keep-alive length|chunked DELAY_MS PIECES")
		os.Exit(2)
	}
	url, timeoutMs := os.Args[1], os.Args[2]
	bodyBytes, rounds := number(os.Args[3]), number(os.Args[4])
	keepAlive, chunked := os.Args[5] == "keep-alive", os.Args[6] == "chunked"
	delay := time.Duration(number(os.Args[7])) * time.Millisecond
	pieces := number(os.Args[8])
	if pieces < 1 || pieces > bodyBytes {
		fmt.Fprintln(os.Stderr, "PIECES must be between 1 and BODY_BYTES")
		os.Exit(2)
	}

	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: !keepAlive,
		MaxConnsPerHost:   1,
	}}
	piece := strings.Repeat("x", bodyBytes/pieces)
	last := piece + strings.Repeat("x", bodyBytes%pieces)
	tally := map[string]map[string]int{"status": {}, "error": {}}
	for i := 0; i < rounds; i++ {
		reader, writer := io.Pipe()
		go func() {
			var err error
			for p := 0; p < pieces && err == nil; p++ {
				time.Sleep(delay)
				if p == pieces-1 {
					_, err = io.WriteString(writer, last)
				} else {
					_, err = io.WriteString(writer, piece)
				}
			}
			writer.CloseWithError(err)
		}()
		req, err := http.NewRequest("POST", url, reader)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if !chunked {
			req.ContentLength = int64(bodyBytes)
		}
		req.Header.Set("x-request-timeout-ms", timeoutMs)
		req.Header.Set("content-type", "application/octet-stream")
		res, err := client.Do(req)
		if err != nil {
			tally["error"][err.Error()]++
			reader.Close()
			continue
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		reader.Close()
		if err != nil {
			tally["error"][err.Error()]++
			continue
		}
		tally["status"][strconv.Itoa(res.StatusCode)]++
	}
	line, _ := json.Marshal(tally)
	fmt.Println(string(line))
}
