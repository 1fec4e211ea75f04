package main

import (
	"bytes"
	"net"
	"strconv"
	"testing"
	"time"
)

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort(t *testing.T) string {
	t.Helper()
	u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	return strconv.Itoa(u.LocalAddr().(*net.UDPAddr).Port)
}

// TestFloor runs the udpfloor ping-pong small, both sides in this process:
// the client reports its round trips and the server stops at the client's
// end datagram.
func TestFloor(t *testing.T) {
	for _, connect := range []bool{false, true} {
		t.Run(strconv.FormatBool(connect), func(t *testing.T) { testFloor(t, connect) })
	}
}

func testFloor(t *testing.T, connect bool) {
	a, b := "127.0.0.1:"+freeUDPPort(t), "127.0.0.1:"+freeUDPPort(t)
	errc := make(chan error, 1)
	go func() {
		var sout bytes.Buffer
		errc <- runFloor([]string{"-server", "-bind", b, "-peer", a, "-idle", "20s", "-connect=" + strconv.FormatBool(connect)}, &sout)
	}()
	var out bytes.Buffer
	if err := runFloor([]string{"-bind", a, "-peer", b, "-n", "300", "-warm", "20", "-idle", "20s", "-connect=" + strconv.FormatBool(connect)}, &out); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("server: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop at the end datagram")
	}
	f := fields(out.String())
	if f["n"] != 300 || f["p50"] <= 0 || f["p99"] < f["p50"] || f["p99.9"] < f["p99"] {
		t.Fatalf("figures %q", out.String())
	}
}

// TestFloorErrors: bad flags and a silent peer end with an error.
func TestFloorErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-bind", "nonsense"},
		{"-peer", "127.0.0.1"},
		{"-bind", "[::1]:0", "-peer", "[::1]:9"},
		{"-n", "0"},
	} {
		if err := runFloor(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	// Nobody answers: the client gives up after -idle.
	a, b := "127.0.0.1:"+freeUDPPort(t), "127.0.0.1:"+freeUDPPort(t)
	err := runFloor([]string{"-bind", a, "-peer", b, "-n", "1", "-warm", "0", "-idle", "50ms"}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("no error without a peer")
	}
}
