//go:build linux

package crc

import (
	"os"
	"syscall"
	"testing"
)

// TestNoOverread places inputs right after and right before inaccessible
// pages, so reading outside p crashes the test.
func TestNoOverread(t *testing.T) {
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 3*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("mmap:", err)
	}
	defer syscall.Munmap(mem)
	for i := page; i < 2*page; i++ {
		mem[i] = byte(i * 13)
	}
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	if err := syscall.Mprotect(mem[2*page:], syscall.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	for n := 0; n <= page; n++ {
		for _, p := range [][]byte{mem[page : page+n], mem[2*page-n : 2*page]} {
			if got, want := Update(uint32(n), p), ref(uint32(n), p); got != want {
				t.Fatalf("len %d: Update = %#08x, crc32 = %#08x", n, got, want)
			}
		}
	}
}
