//go:build capi

package main

/*
#cgo CFLAGS: -O2 -Wall -Wno-unused-function
#include "srd.h"
*/
import "C"

func main() {}
