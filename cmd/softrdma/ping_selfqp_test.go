package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestPingSelfQP runs rping -q (QPs the tool creates and moves with
// InitQPAttr's attributes) on the server, the client and both: the pings
// go through with their data validated.
func TestPingSelfQP(t *testing.T) {
	port := freeUDPPort(t)
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runPing(ctx, args, out) }
	for _, c := range []struct {
		name           string
		server, client []string
	}{
		{"both", []string{"-q"}, []string{"-q"}},
		{"server", []string{"-q"}, nil},
		{"client", nil, []string{"-q"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, cl := runPair(t, run,
				append([]string{"-s", "-a", "127.0.0.2", "-v", "-p", "7179", "-S", "3000", "-roce-port", port}, c.server...),
				append([]string{"-c", "-a", "127.0.0.2", "-I", "127.0.0.1", "-p", "7179", "-C", "3", "-vV", "-S", "3000", "-roce-port", port}, c.client...))
			if strings.Count(cl, "ping data: rdma-ping-") != 3 {
				t.Fatalf("client output:\n%s", cl)
			}
			if strings.Count(s, "server ping data: rdma-ping-") != 3 {
				t.Fatalf("server output:\n%s", s)
			}
		})
	}
}
