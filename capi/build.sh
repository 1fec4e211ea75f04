#!/bin/sh
# Builds softrdma's libibverbs.so.1 (capi/ibverbs) into DIR (default
# ./capi-lib), and librdmacm.so.1, a second name of the same file (one Go
# runtime per process): programs linked against libibverbs and librdmacm
# then run on softrdma with LD_LIBRARY_PATH=DIR. Needs cgo, gcc and the
# libibverbs-dev and librdmacm-dev headers.
set -eu
dir=${1:-capi-lib}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
go build -C "$src/.." -tags capi -buildmode=c-shared \
	-ldflags="-extldflags=-Wl,--version-script=$src/ibverbs/libibverbs.map" \
	-o "$(cd "$dir" && pwd)/libibverbs.so.1" ./capi/ibverbs
rm -f "$dir/libibverbs.so.h" # cgo's header of the Go side: not the API
ln -sf libibverbs.so.1 "$dir/librdmacm.so.1"
echo "built $dir/libibverbs.so.1 and $dir/librdmacm.so.1: run programs with LD_LIBRARY_PATH=$dir SOFTRDMA_DEVICES=..."
