// A grpc-go peer for hopbudget's gRPC interop test (crates/hopbudget/tests/grpc/peer_grpcgo.rs): the reference gRPC
// implementation, whose deadlines are Go's context deadlines, beside grpcio and grpc-js.
//
// Usage:
//
//	grpcgo_peer client ADDR METHOD REQUEST_HEX TIMEOUT_MS [CANCEL_MS]
//	    Calls METHOD on ADDR with the raw request bytes under a context whose deadline is
//	    TIMEOUT_MS from now (cancelled after CANCEL_MS, when given), then prints one JSON line:
//	    {"code": "OK" | status name, "reply_hex": ..., "details": ..., "trailers": {...}}.
//	grpcgo_peer server METHOD SLEEP_MS
//	    Serves METHOD on 127.0.0.1:0 (the port is printed on the first line); each call waits
//	    SLEEP_MS, then answers empty bytes with trailing metadata `x-time-remaining-ms`: what
//	    the call's context deadline left when the call arrived (`none` without a deadline).
//
// Built against Debian's grpc-go (golang-google-grpc-dev) with GOPATH=/usr/share/gocode and
// GO111MODULE=off; the test builds it into its scratch directory.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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

// The canonical status names, as the other peers print them.
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func millis(s string) time.Duration {
	ms, err := strconv.Atoi(s)
	if err != nil {
		fail("not a number of milliseconds: %q", s)
	}
	return time.Duration(ms) * time.Millisecond
}

func client(addr, method, requestHex, timeoutMs string, cancelMs []string) {
	req, err := hex.DecodeString(requestHex)
	if err != nil {
		fail("request: %v", err)
	}
	conn, err := grpc.Dial(addr, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fail("dial %s: %v", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), millis(timeoutMs))
	defer cancel()
	if len(cancelMs) > 0 {
		time.AfterFunc(millis(cancelMs[0]), cancel)
	}
	var reply []byte
	var trailer metadata.MD
	err = conn.Invoke(ctx, method, &req, &reply, grpc.Trailer(&trailer))
	st := status.Convert(err)
	out := map[string]interface{}{
		"code":      codeNames[st.Code()],
		"reply_hex": hex.EncodeToString(reply),
		"details":   st.Message(),
	}
	trailers := map[string]string{}
	for k, v := range trailer {
		if len(v) > 0 {
			trailers[k] = v[0]
		}
	}
	out["trailers"] = trailers
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}

func server(method, sleepMs string) {
	sleep := millis(sleepMs)
	handler := func(_ interface{}, stream grpc.ServerStream) error {
		name, _ := grpc.MethodFromServerStream(stream)
		if name != method {
			return status.Errorf(codes.Unimplemented, "no method %s", name)
		}
		left := "none"
		if deadline, ok := stream.Context().Deadline(); ok {
			left = strconv.FormatInt(time.Until(deadline).Milliseconds(), 10)
		}
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		time.Sleep(sleep)
		stream.SetTrailer(metadata.Pairs("x-time-remaining-ms", left))
		empty := []byte{}
		return stream.SendMsg(&empty)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen: %v", err)
	}
	fmt.Println(lis.Addr().(*net.TCPAddr).Port)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(handler))
	if err := srv.Serve(lis); err != nil {
		fail("serve: %v", err)
	}
}

func main() {
	encoding.RegisterCodec(raw{})
	args := os.Args[1:]
	switch {
	case len(args) >= 5 && args[0] == "client":
		client(args[1], args[2], args[3], args[4], args[5:])
	case len(args) == 3 && args[0] == "server":
		server(args[1], args[2])
	default:
		fail("usage: grpcgo_peer client ADDR METHOD REQUEST_HEX TIMEOUT_MS [CANCEL_MS] | server METHOD SLEEP_MS")
	}
}
