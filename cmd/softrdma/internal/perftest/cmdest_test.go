package perftest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// cmDestPerftest is a keys message as perftest 4.5 (x86_64) sends it in
// rdma_cm mode: lid 0, out_reads 0x10, qpn 0x12, psn 0x2cf88c, rkey 0x3bf,
// 4 bytes of padding (here garbage, as on perftest's stack), vaddr
// 0x7fcc15980000, GID ::ffff:198.18.0.2, srqn 0, gid_index 1.
const cmDestPerftest = "00000000" + "00000010" + "00000012" + "002cf88c" + "000003bf" + "deadbeef" +
	"00007fcc15980000" + "00000000000000000000ffffc6120002" + "00000000" + "00000001"

func TestParseCMDestPerftest(t *testing.T) {
	msg, _ := hex.DecodeString(cmDestPerftest)
	if len(msg) != CMDestSize {
		t.Fatalf("test message has %d bytes", len(msg))
	}
	d, err := ParseCMDest(msg)
	if err != nil {
		t.Fatal(err)
	}
	want := Dest{OutReads: 0x10, QPN: 0x12, PSN: 0x2cf88c, RKey: 0x3bf, VAddr: 0x7fcc15980000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 2}}
	if d != want {
		t.Errorf("got %+v\nwant %+v", d, want)
	}
}

func TestCMDestRoundTrip(t *testing.T) {
	d := Dest{LID: 0xbeef, OutReads: 128, QPN: 0xabcdef, PSN: 0x123456, RKey: 0xdeadbeef, VAddr: 0x0123456789abcdef,
		GID: [16]byte{0xfd, 0, 1, 0x98, 0, 0x18, 15: 1}, SRQN: 7}
	b := d.MarshalCM(2)
	if len(b) != CMDestSize {
		t.Fatalf("marshalled %d bytes", len(b))
	}
	if !bytes.Equal(b[52:], []byte{0, 0, 0, 2}) || !bytes.Equal(b[20:24], []byte{0, 0, 0, 0}) {
		t.Errorf("gid_index or padding wrong: % x", b)
	}
	got, err := ParseCMDest(b)
	if err != nil || got != d {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, d)
	}
}

func TestParseCMDestTruncated(t *testing.T) {
	msg, _ := hex.DecodeString(cmDestPerftest)
	for n := 0; n < len(msg); n++ {
		if _, err := ParseCMDest(msg[:n]); !errors.Is(err, ErrExchange) {
			t.Errorf("%d bytes: err %v, want ErrExchange", n, err)
		}
	}
}

func TestParseCMDestOutOfRange(t *testing.T) {
	for _, off := range []int{cmOffLID + 1, cmOffQPN, cmOffPSN} {
		msg, _ := hex.DecodeString(cmDestPerftest)
		msg[off] = 1 // LID above 16 bits, QPN or PSN above 24
		if _, err := ParseCMDest(msg); !errors.Is(err, ErrExchange) {
			t.Errorf("byte %d set: err %v, want ErrExchange", off, err)
		}
	}
}

func FuzzParseCMDest(f *testing.F) {
	msg, _ := hex.DecodeString(cmDestPerftest)
	f.Add(msg)
	f.Add(msg[:20])
	f.Add(bytes.Repeat([]byte{0xff}, CMDestSize+3))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseCMDest(b)
		if err != nil {
			if !errors.Is(err, ErrExchange) {
				t.Fatalf("error %v does not wrap ErrExchange", err)
			}
			return
		}
		if len(b) < CMDestSize {
			t.Fatalf("parsed a %d-byte message", len(b))
		}
		again, err := ParseCMDest(d.MarshalCM(0))
		if err != nil || again != d {
			t.Fatalf("re-parse: %+v, %v; want %+v", again, err, d)
		}
	})
}
