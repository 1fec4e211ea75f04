package mad

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestSMPFields(t *testing.T) {
	b := make([]byte, Size)
	path := []byte{0, 1, 3, 7}
	s, err := NewDirectedSMP(b, MethodGet, 0x0015, 0x80000002, 0x1122334455667788, path)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Directed() || s.Direction() || s.HopPointer() != 0 || s.HopCount() != 3 {
		t.Fatalf("new SMP: directed %v D %v hp %d hc %d", s.Directed(), s.Direction(), s.HopPointer(), s.HopCount())
	}
	if s.DrSLID() != PermissiveLID || s.DrDLID() != PermissiveLID {
		t.Fatalf("DrSLID %#x DrDLID %#x", s.DrSLID(), s.DrDLID())
	}
	if !bytes.Equal(s.InitialPath()[:4], path) || s.InitialPath()[4] != 0 {
		t.Fatalf("initial path % x", s.InitialPath()[:8])
	}
	m := s.MAD()
	if m.BaseVersion() != 1 || m.MgmtClass() != 0x81 || m.ClassVersion() != 1 || m.Method() != MethodGet ||
		m.AttributeID() != 0x15 || m.AttributeModifier() != 0x80000002 || m.TransactionID() != 0x1122334455667788 {
		t.Fatalf("header %+v", m.Fields())
	}
	// The status keeps the D bit and the D bit the status.
	s.SetStatus(0x7fff)
	s.SetDirection(true)
	if s.Status() != 0x7fff || !s.Direction() || b[4] != 0xff || b[5] != 0xff {
		t.Fatalf("status %#x D %v bytes % x", s.Status(), s.Direction(), b[4:6])
	}
	s.SetStatus(0x001c)
	if s.Status() != 0x1c || !s.Direction() || m.Status() != 0x801c {
		t.Fatalf("status %#x D %v", s.Status(), s.Direction())
	}
	s.SetDirection(false)
	if s.Status() != 0x1c || s.Direction() {
		t.Fatalf("status %#x D %v", s.Status(), s.Direction())
	}
	s.SetHopPointer(2)
	s.SetMKey(0x0102030405060708)
	s.SetDrSLID(0x0010)
	s.SetDrDLID(0x0020)
	want := map[int]byte{6: 2, 7: 3, 24: 1, 31: 8, 32: 0, 33: 0x10, 34: 0, 35: 0x20}
	for off, v := range want {
		if b[off] != v {
			t.Errorf("byte %d = %#x, want %#x", off, b[off], v)
		}
	}
	if s.MKey() != 0x0102030405060708 || s.DrSLID() != 0x10 || s.DrDLID() != 0x20 {
		t.Fatal("getters disagree with setters")
	}
	s.Data()[0] = 0xAA
	s.ReturnPath()[63] = 0xBB
	if b[64] != 0xAA || b[255] != 0xBB || len(s.Data()) != 64 || len(s.InitialPath()) != 64 || len(s.ReturnPath()) != 64 {
		t.Fatal("data or return path misplaced")
	}
	if err := s.SetInitialPath(make([]byte, 65)); err == nil {
		t.Fatal("SetInitialPath took 65 bytes")
	}
}

func TestSMPLIDRouted(t *testing.T) {
	b := bytes.Repeat([]byte{0xEE}, Size)
	s, err := NewLIDRoutedSMP(b, MethodSet, 0x0019, 5, 9)
	if err != nil {
		t.Fatal(err)
	}
	if s.Directed() || s.MAD().MgmtClass() != 0x01 || s.MAD().Method() != MethodSet || s.HopCount() != 0 || b[255] != 0 {
		t.Fatalf("LID-routed SMP % x", b[:8])
	}
}

func TestSMPTruncated(t *testing.T) {
	good := make([]byte, Size)
	if _, err := NewDirectedSMP(good, MethodGet, 0x11, 0, 1, []byte{0}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, HeaderSize, SMPDataOffset, SMPPathOffset, Size - 1} {
		if _, err := ParseSMP(good[:n]); !errors.Is(err, ErrTruncated) {
			t.Errorf("ParseSMP of %d bytes: %v, want ErrTruncated", n, err)
		}
		if _, err := NewDirectedSMP(make([]byte, n), MethodGet, 0x11, 0, 1, []byte{0}); !errors.Is(err, ErrTruncated) {
			t.Errorf("NewDirectedSMP into %d bytes: %v", n, err)
		}
		if _, err := NewLIDRoutedSMP(make([]byte, n), MethodGet, 0x11, 0, 1); !errors.Is(err, ErrTruncated) {
			t.Errorf("NewLIDRoutedSMP into %d bytes: %v", n, err)
		}
	}
	if _, err := ParseSMP(append(good, 0)); !errors.Is(err, ErrTooLong) {
		t.Errorf("ParseSMP of %d bytes: %v", Size+1, err)
	}
	if _, err := ParseSMP(good); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[0] = 2
	if _, err := ParseSMP(bad); !errors.Is(err, ErrBaseVersion) {
		t.Errorf("base version 2: %v", err)
	}
	for _, p := range [][]byte{nil, make([]byte, 65)} {
		if _, err := NewDirectedSMP(good, MethodGet, 0x11, 0, 1, p); err == nil {
			t.Errorf("path of %d bytes accepted", len(p))
		}
	}
}

func FuzzParseSMP(f *testing.F) {
	b := make([]byte, Size)
	NewDirectedSMP(b, MethodGet, 0x15, 1, 2, []byte{0, 1, 2})
	f.Add(b)
	f.Add(b[:100])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSMP(b)
		if err != nil {
			if s != nil {
				t.Fatal("ParseSMP returned a view with an error")
			}
			return
		}
		// Every accessor is safe, and setters round-trip.
		st, d := s.Status(), s.Direction()
		s.SetDirection(!d)
		if s.Status() != st || s.Direction() == d {
			t.Fatal("direction change moved the status")
		}
		s.SetStatus(st ^ 1)
		if s.Direction() == d || s.Status() != st^1 {
			t.Fatal("status change moved the direction")
		}
		_ = s.HopPointer() + s.HopCount()
		_ = s.MKey() + uint64(s.DrSLID()) + uint64(s.DrDLID())
		if len(s.Data()) != SMPDataSize || len(s.InitialPath()) != SMPPathSize || len(s.ReturnPath()) != SMPPathSize {
			t.Fatal("bad part sizes")
		}
	})
}

// A subnet manager asks the node two hops out (out of its CA's port 1,
// then out of the switch's port 3) for its NodeInfo; the fabric fills in
// the return path on the way and sends the answer back along it.
func ExampleNewDirectedSMP() {
	b := make([]byte, Size)
	s, err := NewDirectedSMP(b, MethodGet, SMAttrNodeInfo, 0, 0x1234, []byte{0, 1, 3})
	if err != nil {
		panic(err)
	}
	fmt.Println("class", s.MAD().MgmtClass() == ClassSubnDirected, "hops", s.HopCount(), "pointer", s.HopPointer())
	fmt.Printf("DrSLID %#x DrDLID %#x path % x\n", s.DrSLID(), s.DrDLID(), s.InitialPath()[:3])
	// Output:
	// class true hops 2 pointer 0
	// DrSLID 0xffff DrDLID 0xffff path 00 01 03
}
