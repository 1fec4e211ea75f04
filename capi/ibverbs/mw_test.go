//go:build capi

package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestMemoryWindows runs testdata/mw.c: a type 1 window bound by
// ibv_bind_mw (new R_Key, BIND_MW completion), written through and past
// its end and with its key from before the bind; a type 2 window bound by
// a BIND_MW work request and, after LOCAL_INV, by ibv_wr_bind_mw, written
// through; ibv_dealloc_mw.
func TestMemoryWindows(t *testing.T) {
	built(t)
	bin := gcc(t, "testdata/mw.c", "-L"+libDir, "-l:libibverbs.so.1")
	port, _ := freePorts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := command(ctx, "127.0.0.1", port, bin).CombinedOutput()
	if err != nil || !bytes.Equal(out, []byte("mw: ok\n")) {
		t.Fatalf("%v\n%s", err, out)
	}
}
