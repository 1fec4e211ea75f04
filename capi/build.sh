#!/bin/sh
# Builds softrdma's libibverbs.so.1 (capi/ibverbs) into DIR (default
# ./capi-lib): programs linked against libibverbs then run on softrdma
# with LD_LIBRARY_PATH=DIR. Needs cgo, gcc and the libibverbs-dev headers.
set -eu
dir=${1:-capi-lib}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
go build -C "$src/.." -tags capi -buildmode=c-shared \
	-ldflags="-extldflags=-Wl,--version-script=$src/ibverbs/libibverbs.map" \
	-o "$(cd "$dir" && pwd)/libibverbs.so.1" ./capi/ibverbs
rm -f "$dir/libibverbs.so.h" # cgo's header of the Go side: not the API
echo "built $dir/libibverbs.so.1: run programs with LD_LIBRARY_PATH=$dir SOFTRDMA_DEVICES=..."
