//go:build !capi

package main

import (
	"fmt"
	"os"
)

// Without the capi build tag this package is a placeholder, so that
// go build ./... and go test ./... need neither cgo nor libibverbs-dev;
// capi/build.sh builds the library.
func main() {
	fmt.Fprintln(os.Stderr, "capi/ibverbs is a shared library: build it with capi/build.sh (go build -tags capi -buildmode=c-shared ...)")
	os.Exit(2)
}
