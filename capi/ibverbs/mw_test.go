//go:build capi

package main

import "testing"

// TestMemoryWindows runs testdata/mw.c: a type 1 window bound by
// ibv_bind_mw (new R_Key, BIND_MW completion), written through and past
// its end and with its key from before the bind; a type 2 window bound by
// a BIND_MW work request and, after LOCAL_INV, by ibv_wr_bind_mw, written
// through; ibv_dealloc_mw.
func TestMemoryWindows(t *testing.T) {
	runProgram(t, "mw")
}
