//go:build capi

package main

/*
#include <stdint.h>
*/
import "C"

import "runtime/metrics"

// softrdma_go_allocs returns the number of heap objects the Go side has
// allocated so far (runtime/metrics), exported under a private version
// for TestABI's program, which checks that posting and polling allocate
// nothing per call.
//
//export softrdma_go_allocs
func softrdma_go_allocs() C.uint64_t {
	s := [1]metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s[:])
	return C.uint64_t(s[0].Value.Uint64())
}
