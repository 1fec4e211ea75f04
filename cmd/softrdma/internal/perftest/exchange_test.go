package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
)

// A keys message as perftest 4.5's ethernet_write_keys formats it for an
// IPv4 GID (captured from ib_write_bw on rxe: QPN 0x11, PSN 0x1af9f4, RKey
// 0x316).
const rxeKeys = "0000:0001:000011:1af9f4:00000316:00007f48aec12000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:02:00000000:"

func TestParseDestPerftest(t *testing.T) {
	msg := make([]byte, KeyMsgSize)
	copy(msg, rxeKeys)
	d, err := ParseDest(msg)
	if err != nil {
		t.Fatal(err)
	}
	want := Dest{OutReads: 1, QPN: 0x11, PSN: 0x1af9f4, RKey: 0x316, VAddr: 0x7f48aec12000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 2}}
	if d != want {
		t.Fatalf("got %+v\nwant %+v", d, want)
	}
	if got := d.Marshal(); !bytes.Equal(got, msg) {
		t.Fatalf("Marshal:\n%q\nwant\n%q", got, msg)
	}
	if len(rxeKeys) != KeyMsgSize-1 {
		t.Fatalf("the perftest message is %d bytes plus NUL, want %d", len(rxeKeys), KeyMsgSize)
	}
}

func TestDestRoundTrip(t *testing.T) {
	for _, d := range []Dest{
		{},
		{LID: 0xffff, OutReads: 128, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: math.MaxUint64, SRQN: 0xffffffff,
			GID: [16]byte{0xfd, 0, 1, 0x98, 0, 0x18, 15: 1}},
	} {
		got, err := ParseDest(d.Marshal())
		if err != nil || got != d {
			t.Errorf("round trip of %+v: %+v, %v", d, got, err)
		}
	}
}

// TestParseDestTruncated cuts a valid message at every length, both as a
// short buffer and as a NUL inside the full-size message.
func TestParseDestTruncated(t *testing.T) {
	full := (&Dest{QPN: 0x12, PSN: 0x345, RKey: 7, VAddr: 0x1000}).Marshal()
	for n := 0; n < KeyMsgSize; n++ {
		if _, err := ParseDest(full[:n]); !errors.Is(err, ErrExchange) {
			t.Errorf("%d bytes: err %v, want ErrExchange", n, err)
		}
	}
	end := bytes.IndexByte(full, 0)
	for n := 0; n < end; n++ {
		msg := make([]byte, KeyMsgSize)
		copy(msg, full[:n])
		if _, err := ParseDest(msg); !errors.Is(err, ErrExchange) {
			t.Errorf("text cut at %d: err %v, want ErrExchange", n, err)
		}
	}
}

func TestParseDestMalformed(t *testing.T) {
	ok := strings.TrimRight(string((&Dest{QPN: 1}).Marshal()), "\x00")
	for _, s := range []string{
		strings.Replace(ok, "0000:", "zzzz:", 1),      // not hex
		strings.Replace(ok, "0000:", "10000:", 1),     // LID above 16 bits
		strings.Replace(ok, "000001:", "1000000:", 1), // QPN above 24 bits
		ok + "00:",                           // a field too many
		strings.TrimSuffix(ok, "00000000:"),  // a field too few
		strings.Replace(ok, ":00:", "::", 1), // empty field
		strings.Replace(ok, ":00:00:00:00:00:", ":00:100:00:00:00:", 1), // GID byte above 8 bits
	} {
		msg := make([]byte, KeyMsgSize)
		copy(msg, s)
		if _, err := ParseDest(msg); !errors.Is(err, ErrExchange) {
			t.Errorf("%q: err %v, want ErrExchange", s, err)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]float64{"6.06\x00\x00": 6.06, "5.70": 5.7, "": 0, "x6": 0, "6.": 6, "6.1.2": 6.1, " 7": 7} {
		if got := ParseVersion([]byte(in)); got != want {
			t.Errorf("ParseVersion(%q) = %v, want %v", in, got, want)
		}
	}
	for in, want := range map[string]int{"3\x00": 3, "5": 5, "6\x00": 0, "0\x00": 0, "": 0, "\x00\x00": 0} {
		if got := ParseMTU([]byte(in)); got != want {
			t.Errorf("ParseMTU(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestBWReport(t *testing.T) {
	r := BWReport{Size: 65536, Iters: 5000, BWPeak: 1234.5, BWAvg: 1000.25, MsgRate: 0.016}
	b := MarshalBWReport(r)
	// Big-endian, as perftest's hton_long and hton_double send them.
	if b[5] != 1 || b[7] != 0 || b[14] != 0x13 || b[15] != 0x88 {
		t.Fatalf("size and iterations not big-endian: % x", b[:16])
	}
	got, err := ParseBWReport(b)
	if err != nil || got != r {
		t.Fatalf("got %+v, %v", got, err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := ParseBWReport(b[:n]); !errors.Is(err, ErrExchange) {
			t.Errorf("%d bytes: err %v", n, err)
		}
	}
	bad := MarshalBWReport(BWReport{BWAvg: math.NaN()})
	if _, err := ParseBWReport(bad); !errors.Is(err, ErrExchange) {
		t.Errorf("NaN average accepted: %v", err)
	}
}

// TestExchangeOrder checks that the client writes first and the server
// reads first, and that a peer closing mid-message is an exchange error.
func TestExchangeOrder(t *testing.T) {
	a, b := net.Pipe()
	cli, srv := testConn(a, true), testConn(b, false)
	done := make(chan error, 1)
	go func() {
		got, err := srv.Exchange([]byte("srv!"), 4, "test")
		if err == nil && string(got) != "cli!" {
			err = fmt.Errorf("server got %q", got)
		}
		done <- err
	}()
	got, err := cli.Exchange([]byte("cli!"), 4, "test")
	if err != nil || string(got) != "srv!" {
		t.Fatalf("client got %q, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() {
		b.Write([]byte("12"))
		b.Close()
	}()
	srvSide := testConn(a, false)
	if _, err := srvSide.Exchange([]byte("xxxx"), 4, "test"); !errors.Is(err, ErrExchange) {
		t.Fatalf("truncated message: %v, want ErrExchange", err)
	}
	a.Close()
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte(rxeKeys + "\x00"))
	f.Add((&Dest{QPN: 0xffffff, VAddr: 1 << 63}).Marshal())
	f.Add([]byte("0000:0000:000000:000000:00000000:0000000000000000::::::::::::::::00000000:"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := ParseDest(msg)
		if err != nil {
			if !errors.Is(err, ErrExchange) {
				t.Fatalf("error %v does not wrap ErrExchange", err)
			}
			return
		}
		if d.QPN > 0xffffff || d.PSN > 0xffffff {
			t.Fatalf("24-bit field out of range: %+v", d)
		}
		again, err := ParseDest(d.Marshal())
		if err != nil || again != d {
			t.Fatalf("re-parse of %+v: %+v, %v", d, again, err)
		}
	})
}

func FuzzParseBWReport(f *testing.F) {
	f.Add(MarshalBWReport(BWReport{Size: 2, Iters: 5, BWPeak: 1, BWAvg: 1, MsgRate: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseBWReport(b)
		if err != nil {
			if !errors.Is(err, ErrExchange) {
				t.Fatalf("error %v does not wrap ErrExchange", err)
			}
			return
		}
		if got, err := ParseBWReport(MarshalBWReport(r)); err != nil || got != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	f.Add([]byte("6.06\x00"))
	f.Add([]byte("5.70"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v := ParseVersion(b); v < 0 || math.IsNaN(v) {
			t.Fatalf("ParseVersion(%q) = %v", b, v)
		}
		if m := ParseMTU(b); m < 0 || m > 5 {
			t.Fatalf("ParseMTU(%q) = %v", b, m)
		}
	})
}

// testConn wraps an established connection; client says which side writes
// first.
func testConn(c net.Conn, client bool) *Conn { return newConn(context.Background(), c, client) }
