package mem

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"unsafe"
)

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func TestAlloc(t *testing.T) {
	pg := os.Getpagesize()
	for _, n := range []int{1, 8, pg - 1, pg, pg + 1, 1 << 20} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		if len(b) != n || cap(b) < n {
			t.Errorf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if addrOf(b)%uintptr(pg) != 0 {
			t.Errorf("Alloc(%d) at %#x, not page-aligned", n, addrOf(b))
		}
		for i, c := range b {
			if c != 0 {
				t.Fatalf("Alloc(%d): byte %d = %#x, not zeroed", n, i, c)
			}
		}
		b[0], b[n-1] = 1, 2
		if err := Free(b); err != nil {
			t.Errorf("Free after Alloc(%d): %v", n, err)
		}
	}
	if _, err := Alloc(0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Alloc(0): %v, want ErrInvalid", err)
	}
	if _, err := Alloc(-1); !errors.Is(err, ErrInvalid) {
		t.Errorf("Alloc(-1): %v, want ErrInvalid", err)
	}
	if err := Free(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Free(nil): %v, want ErrInvalid", err)
	}
}

func TestFreeTwice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only the mapping allocator detects a double free")
	}
	b, err := Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := Free(b); err != nil {
		t.Fatal(err)
	}
	if err := Free(b); !errors.Is(err, ErrInvalid) {
		t.Errorf("second Free: %v, want ErrInvalid", err)
	}
	if err := Free(make([]byte, 100)); !errors.Is(err, ErrInvalid) {
		t.Errorf("Free of Go memory: %v, want ErrInvalid", err)
	}
}

func TestAllocHeap(t *testing.T) {
	pg := os.Getpagesize()
	for _, n := range []int{1, pg, 3*pg + 5} {
		b := allocHeap(n)
		if len(b) != n || cap(b) != n || addrOf(b)%uintptr(pg) != 0 {
			t.Errorf("allocHeap(%d): len %d cap %d at %#x", n, len(b), cap(b), addrOf(b))
		}
	}
}
