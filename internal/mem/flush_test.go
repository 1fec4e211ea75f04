package mem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestFlushRange(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 256)
	g := mustRegister(t, tb, 1, buf, 0x1000, false, FlushGlobal)
	rw := mustRegister(t, tb, 1, buf, 0x1000, false, LocalWrite|RemoteWrite)
	p := func(b []byte) error { return nil }
	pm, err := tb.RegisterPersist(1, buf, 0x1000, false, FlushGlobal|FlushPersistent, p)
	if err != nil {
		t.Fatal(err)
	}
	if pm.Persist == nil || g.RKey == 0 {
		t.Fatalf("Persist %v, FlushGlobal region's RKey %#x", pm.Persist != nil, g.RKey)
	}
	for _, tc := range []struct {
		name     string
		mr       *MR
		pd       PD
		va, n    uint64
		whole    bool
		need     Access
		err      error
		off, len int
	}{
		{"range", g, 1, 0x1010, 16, false, FlushGlobal, nil, 0x10, 16},
		{"zero length inside", g, 1, 0x1100, 0, false, FlushGlobal, nil, 0x100, 0},
		{"zero length past the end", g, 1, 0x1101, 0, false, FlushGlobal, ErrBounds, 0, 0},
		{"past the end", g, 1, 0x10f0, 17, false, FlushGlobal, ErrBounds, 0, 0},
		{"before the start", g, 1, 0xfff, 1, false, FlushGlobal, ErrBounds, 0, 0},
		{"whole region ignores va", g, 1, 0xdead, 1 << 40, true, FlushGlobal, nil, 0, 256},
		{"other PD", g, 2, 0x1000, 1, false, FlushGlobal, ErrPD, 0, 0},
		{"persistent on a global-only region", g, 1, 0x1000, 1, false, FlushPersistent, ErrAccess, 0, 0},
		{"no flush access", rw, 1, 0x1000, 1, false, FlushGlobal, ErrAccess, 0, 0},
		{"persistent", pm, 1, 0x1000, 8, false, FlushGlobal | FlushPersistent, nil, 0, 8},
	} {
		mr, b, err := tb.FlushRange(tc.mr.RKey, tc.pd, tc.va, tc.n, tc.whole, tc.need)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if mr != tc.mr || len(b) != tc.len || (tc.len > 0 && &b[0] != &buf[tc.off]) {
			t.Errorf("%s: %d bytes at %p, want %d at %p", tc.name, len(b), unsafe.SliceData(b), tc.len, &buf[tc.off])
		}
	}
	if _, _, err := tb.FlushRange(0x12345, 1, 0, 0, true, FlushGlobal); !errors.Is(err, ErrKey) {
		t.Errorf("unknown key: %v, want ErrKey", err)
	}
	if err := tb.Deregister(g); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.FlushRange(g.RKey, 1, 0x1000, 0, false, FlushGlobal); !errors.Is(err, ErrKey) {
		t.Errorf("deregistered region: %v, want ErrKey", err)
	}
}

func TestAtomicWrite(t *testing.T) {
	var w [3]uint64
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 24)
	v := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := AtomicWrite(b[8:16], &v); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[8:16], v[:]) || w[0] != 0 || w[2] != 0 {
		t.Errorf("memory %x after AtomicWrite(%x) at 8", b, v)
	}
	if got, err := AtomicRead(b[8:16]); err != nil || got != v {
		t.Errorf("AtomicRead = %x, %v", got, err)
	}
	if err := AtomicWrite(b[4:12], &v); !errors.Is(err, ErrAlign) {
		t.Errorf("misaligned: %v, want ErrAlign", err)
	}
	if err := AtomicWrite(b[8:12], &v); !errors.Is(err, ErrBounds) {
		t.Errorf("4 bytes: %v, want ErrBounds", err)
	}
	if _, err := AtomicRead(b[4:12]); !errors.Is(err, ErrAlign) {
		t.Errorf("misaligned AtomicRead: %v, want ErrAlign", err)
	}
}

// TestAtomicWriteNotTorn stores two patterns that differ in every byte
// while a reader loads the word: every load is one of them.
func TestAtomicWriteNotTorn(t *testing.T) {
	var w uint64
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w)), 8)
	a, c := [8]byte{}, [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			v := &a
			if i%2 == 0 {
				v = &c
			}
			_ = AtomicWrite(b, v)
		}
	}()
	for range n {
		got, _ := AtomicRead(b)
		if got != a && got != c {
			t.Fatalf("torn value %x", got)
		}
		v := FetchAdd(b, 0) // a concurrent atomic sees whole values too
		if v != 0 && v != ^uint64(0) {
			t.Fatalf("FetchAdd saw torn value %#x", v)
		}
	}
	wg.Wait()
}

// dirtyKB returns the dirty kilobytes of the mapping that starts at addr,
// from /proc/self/smaps.
func dirtyKB(t *testing.T, addr uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	kb := 0
	prefix := fmt.Sprintf("%x-", addr)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			if in {
				return kb
			}
			in = strings.HasPrefix(line, prefix)
			continue
		}
		if in && (strings.HasPrefix(line, "Shared_Dirty:") || strings.HasPrefix(line, "Private_Dirty:")) {
			n, err := strconv.Atoi(strings.Fields(line)[1])
			if err != nil {
				t.Fatal(err)
			}
			kb += n
		}
	}
	if !in {
		t.Fatalf("no mapping at %#x in smaps", addr)
	}
	return kb
}

// TestMapFileSync: stores into a file mapping dirty its pages; SyncFile
// writes them back (the mapping's dirty count drops to 0) and another
// descriptor reads the data from the file.
func TestMapFileSync(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("file mappings need Linux")
	}
	pg := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "mr")
	if err := os.WriteFile(path, make([]byte, 4*pg), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := MapFile(f, 0, 5*pg); !errors.Is(err, ErrInvalid) {
		t.Errorf("mapping past the end of the file: %v, want ErrInvalid", err)
	}
	if _, err := MapFile(f, 1, pg); !errors.Is(err, ErrInvalid) {
		t.Errorf("unaligned offset: %v, want ErrInvalid", err)
	}
	b, err := MapFile(f, int64(pg), 3*pg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Unmap(b); err != nil {
			t.Error(err)
		}
	}()
	copy(b[pg+100:], "persistent bytes")
	if d := dirtyKB(t, uintptr(unsafe.Pointer(&b[0]))); d == 0 {
		t.Fatal("a store left the mapping clean: cannot tell whether SyncFile writes back")
	}
	if err := SyncFile(b[pg+100 : pg+116]); err != nil {
		t.Fatal(err)
	}
	if d := dirtyKB(t, uintptr(unsafe.Pointer(&b[0]))); d != 0 {
		t.Errorf("%d kB still dirty after SyncFile", d)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "persistent bytes"; string(got[2*pg+100:2*pg+116]) != want {
		t.Errorf("file holds %q, want %q", got[2*pg+100:2*pg+116], want)
	}
	if err := SyncFile(nil); err != nil {
		t.Errorf("SyncFile(nil): %v", err)
	}
}
