// A grpc-go service for hopbudget's sidecar tests (crates/hopbudget-cli/tests/fleet/go.rs): it
// reports on stdout the deadline grpc-go put in each call's context (from the `grpc-timeout`
// the proxy restated) and when that context ends, so a test can compare them with what the
// caller sent (rule C25, issue #37).
//
// Usage:
//
//	grpcgo_service [-downstream HOST:PORT]
//	    Serves every method on 127.0.0.1:0 (h2c); the first line printed is "port N". Each
//	    call prints "arrived METHOD deadline_ms=N" (the context's time left on arrival, or
//	    "none"), then for a method ending in "/Wait" waits for the context to end and prints
//	    "cancelled err=ERR"; any other method answers an empty message at once, or, with
//	    -downstream, calls the same method there and answers what it got back.
//
// The downstream call is forgetful on purpose, as many services are: a fresh
// context.Background(), so no deadline goes with it; only the trace context is forwarded, as a
// tracing interceptor would. `hopbudget check --grpc` in front of it fails C2 and C8, and
// behind `hopbudget proxy` (the call dialled to an --egress-to listener) passes
// (crates/hopbudget-cli/tests/fleet/check_interop.rs).
//
// Built against Debian's grpc-go (golang-google-grpc-dev) with GOPATH=/usr/share/gocode and
// GO111MODULE=off; the test builds it into the target dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The -downstream address, if any, and its connection, dialled on the first call: the test
// starts the service before the sidecar whose egress listener it dials, and grpc-go fails
// calls fast for a second after a refused connection.
var (
	downstreamAddr string
	downstreamOnce sync.Once
	downstream     *grpc.ClientConn
	downstreamErr  error
)

// raw passes message bytes through unchanged. Registered under the name "proto", it replaces
// the protobuf codec in this process, so no generated code is needed.
type raw struct{}

func (raw) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (raw) Name() string { return "proto" }

func handle(_ interface{}, stream grpc.ServerStream) error {
	ctx := stream.Context()
	method, _ := grpc.MethodFromServerStream(stream)
	left := "none"
	if deadline, ok := ctx.Deadline(); ok {
		left = fmt.Sprintf("%d", time.Until(deadline).Milliseconds())
	}
	fmt.Printf("arrived %s deadline_ms=%s\n", method, left)
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	if strings.HasSuffix(method, "/Wait") {
		<-ctx.Done()
		fmt.Printf("cancelled err=%v\n", ctx.Err())
		return status.FromContextError(ctx.Err()).Err()
	}
	reply := []byte{}
	if downstreamAddr != "" {
		downstreamOnce.Do(func() {
			downstream, downstreamErr = grpc.Dial(downstreamAddr, grpc.WithInsecure())
		})
		if downstreamErr != nil {
			return status.Errorf(codes.Unavailable, "dial %s: %v", downstreamAddr, downstreamErr)
		}
		out := context.Background()
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if trace := md.Get("traceparent"); len(trace) > 0 {
				out = metadata.AppendToOutgoingContext(out, "traceparent", trace[0])
			}
		}
		if err := downstream.Invoke(out, method, &req, &reply); err != nil {
			return err
		}
	}
	return stream.SendMsg(&reply)
}

func main() {
	to := flag.String("downstream", "", "call each method on to HOST:PORT too (h2c)")
	flag.Parse()
	encoding.RegisterCodec(raw{})
	downstreamAddr = *to
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	fmt.Printf("port %d\n", listener.Addr().(*net.TCPAddr).Port)
	server := grpc.NewServer(grpc.UnknownServiceHandler(handle))
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
