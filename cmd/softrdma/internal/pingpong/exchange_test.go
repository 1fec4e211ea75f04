package pingpong

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

func TestDestRoundTrip(t *testing.T) {
	d := Dest{LID: 0xbeef, QPN: 0x123456, PSN: 0xabcdef, GID: wire.GIDFromAddr(netip.MustParseAddr("198.18.0.1"))}
	m := d.Marshal()
	want := "beef:123456:abcdef:00000000000000000000ffffc6120001\x00"
	if string(m[:]) != want {
		t.Fatalf("Marshal = %q, want %q", m[:], want)
	}
	got, err := ParseDest(m[:])
	if err != nil || got != d {
		t.Fatalf("ParseDest = %+v, %v; want %+v", got, err, d)
	}
	// What the C tools send for a port without LID and GID index -1.
	var zero Dest
	zm := zero.Marshal()
	if string(zm[:]) != "0000:000000:000000:00000000000000000000000000000000\x00" {
		t.Errorf("zero Dest = %q", zm[:])
	}
}

func TestParseDestMalformed(t *testing.T) {
	good := "0000:000011:a0b1c2:fe800000000000005054fffe12345600"
	for _, m := range []string{
		"",
		"0000:000011:a0b1c2",
		"0000:000011:a0b1c2:fe80",
		"0000:000011:a0b1c2:fe800000000000005054fffe1234560g",
		"00000:00011:a0b1c2:fe800000000000005054fffe12345600",
		"0000:0000011:0b1c2:fe800000000000005054fffe12345600",
		"0000::a0b1c2a:fe800000000000005054fffe12345600000",
		"zzzz:000011:a0b1c2:fe800000000000005054fffe12345600",
		"0000:000011:a0b1c2:fe800000000000005054fffe12345600:",
		"0000;000011;a0b1c2;fe800000000000005054fffe12345600",
	} {
		b := make([]byte, MsgLen)
		copy(b, m)
		if _, err := ParseDest(b); !errors.Is(err, ErrExchange) {
			t.Errorf("ParseDest(%q) = %v, want ErrExchange", m, err)
		}
	}
	// Every truncation of a good message is rejected.
	full := append([]byte(good), 0)
	if _, err := ParseDest(full); err != nil {
		t.Fatal(err)
	}
	for n := range len(full) {
		if _, err := ParseDest(full[:n]); !errors.Is(err, ErrExchange) {
			t.Errorf("ParseDest of %d bytes = %v, want ErrExchange", n, err)
		}
	}
	// A message filling all 52 bytes without NUL is cut at 52; the GID is
	// then 33 digits and rejected.
	if _, err := ParseDest([]byte(good + "0")); !errors.Is(err, ErrExchange) {
		t.Errorf("unterminated message accepted: %v", err)
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000011:a0b1c2:fe800000000000005054fffe12345600\x00"))
	f.Add([]byte("0000:000000:000000:00000000000000000000000000000000\x00"))
	f.Add(bytes.Repeat([]byte{':'}, MsgLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			return
		}
		m := d.Marshal()
		d2, err := ParseDest(m[:])
		if err != nil || d2 != d {
			t.Fatalf("re-parse of %q: %+v, %v; want %+v", m[:], d2, err, d)
		}
	})
}
