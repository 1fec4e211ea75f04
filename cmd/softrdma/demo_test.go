package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// runDemoArgs runs the demo with short measurements and returns its output.
func runDemoArgs(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	args = append([]string{"-bw-time", "100ms", "-lat-iters", "100"}, args...)
	if err := runDemo(ctx, args, &out); err != nil {
		t.Fatalf("demo %v: %v\n%s", args, err, out.String())
	}
	if !strings.Contains(out.String(), "All operations completed successfully.") {
		t.Fatalf("demo %v did not finish:\n%s", args, out.String())
	}
	return out.String()
}

// TestDemo runs README's main command on 127.0.0.1 and 127.0.0.2.
func TestDemo(t *testing.T) {
	out := runDemoArgs(t, "-port", freeUDPPort(t))
	for _, want := range []string{"device A: softrdma0, GID[0] ::ffff:127.0.0.1", "device B: softrdma1, GID[0] ::ffff:127.0.0.2",
		"data identical", "CAS(100 -> 500) saw 100; FAA(+25) saw 500"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestDemoSharedFlags runs the demo with --bind and --pcap: the capture
// holds the demo's traffic, and decodes.
func TestDemoSharedFlags(t *testing.T) {
	port := freeUDPPort(t)
	capture := t.TempDir() + "/demo.pcap"
	out := runDemoArgs(t, "-port", port, "--bind", "127.0.0.1,127.0.0.2", "--pcap", capture)
	if !strings.Contains(out, "device B: softrdma1, GID[0] ::ffff:127.0.0.2") {
		t.Errorf("output:\n%s", out)
	}
	var dump bytes.Buffer
	if err := runDump(context.Background(), []string{"-port", port, capture}, &dump); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RDMA_READ_REQUEST", "COMPARE_SWAP", "FETCH_ADD", "(0 with a bad ICRC)"} {
		if !strings.Contains(dump.String(), want) {
			t.Errorf("the capture lacks %q", want)
		}
	}
}
