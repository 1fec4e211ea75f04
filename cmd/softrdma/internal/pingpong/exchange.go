package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/wire"
)

// MsgLen is the length of one exchange message: "LLLL:QQQQQQ:PPPPPP:" and
// 32 hex digits of GID, with the terminating NUL the C tools send.
const MsgLen = 52

// doneMsg is what the client sends last: "done" and its NUL.
var doneMsg = []byte("done\x00")

// SRQLines is the number of messages each side of ibv_srq_pingpong sends,
// whatever the number of QPs in use (its MAX_QP): the lines past -q carry no
// meaning and are not parsed.
const SRQLines = 256

// ErrExchange is wrapped by errors about the TCP exchange.
var ErrExchange = errors.New("pingpong exchange")

// Dest is what each side tells the other of one QP.
type Dest struct {
	LID uint16
	QPN wire.QPN
	PSN wire.PSN
	GID wire.GID
}

// Marshal returns the message for d.
func (d Dest) Marshal() [MsgLen]byte {
	var m [MsgLen]byte
	b := fmt.Appendf(m[:0], "%04x:%06x:%06x:%x", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, d.GID[:])
	_ = b // exactly 51 bytes; m[51] stays NUL
	return m
}

// ParseDest parses one exchange message. It accepts what the C tools send:
// hexadecimal LID (up to 4 digits), QPN and PSN (up to 6), and a GID of 32
// hex digits, colon-separated and NUL-terminated (or filling the message).
func ParseDest(m []byte) (Dest, error) {
	var d Dest
	if len(m) != MsgLen {
		return d, fmt.Errorf("%w: message of %d bytes, want %d", ErrExchange, len(m), MsgLen)
	}
	s := m
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := bytes.Split(s, []byte(":"))
	if len(f) != 4 {
		return d, fmt.Errorf("%w: malformed message %q: want LID:QPN:PSN:GID", ErrExchange, s)
	}
	num := func(b []byte, digits int, what string) (uint64, error) {
		if len(b) == 0 || len(b) > digits {
			return 0, fmt.Errorf("%w: malformed %s %q in %q", ErrExchange, what, b, s)
		}
		v, err := strconv.ParseUint(string(b), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: malformed %s %q in %q", ErrExchange, what, b, s)
		}
		return v, nil
	}
	lid, err := num(f[0], 4, "LID")
	if err != nil {
		return d, err
	}
	qpn, err := num(f[1], 6, "QPN")
	if err != nil {
		return d, err
	}
	psn, err := num(f[2], 6, "PSN")
	if err != nil {
		return d, err
	}
	if len(f[3]) != 32 {
		return d, fmt.Errorf("%w: malformed GID %q in %q: want 32 hex digits", ErrExchange, f[3], s)
	}
	for i := range 16 {
		v, err := strconv.ParseUint(string(f[3][2*i:2*i+2]), 16, 8)
		if err != nil {
			return d, fmt.Errorf("%w: malformed GID %q in %q", ErrExchange, f[3], s)
		}
		d.GID[i] = byte(v)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), wire.QPN(qpn), wire.PSN(psn)
	return d, nil
}

// deadline bounds each exchange once connected.
const exchangeTimeout = 30 * time.Second

// writeDests sends mine padded with zero messages to lines messages.
func writeDests(c net.Conn, mine []Dest, lines int) error {
	buf := make([]byte, 0, lines*MsgLen)
	for i := range lines {
		var d Dest
		if i < len(mine) {
			d = mine[i]
		}
		m := d.Marshal()
		buf = append(buf, m[:]...)
	}
	if _, err := c.Write(buf); err != nil {
		return fmt.Errorf("%w: couldn't send local address: %v", ErrExchange, err)
	}
	return nil
}

// readDests reads lines messages and parses the first n.
func readDests(c net.Conn, n, lines int) ([]Dest, error) {
	buf := make([]byte, lines*MsgLen)
	if k, err := io.ReadFull(c, buf); err != nil {
		return nil, fmt.Errorf("%w: couldn't read remote address (%d of %d bytes): %v", ErrExchange, k, len(buf), err)
	}
	out := make([]Dest, n)
	for i := range n {
		d, err := ParseDest(buf[i*MsgLen : (i+1)*MsgLen])
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// ClientExchange runs the client side on c: send mine, read the server's
// destinations, send "done".
func ClientExchange(ctx context.Context, c net.Conn, mine []Dest, lines int) ([]Dest, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	c.SetDeadline(time.Now().Add(exchangeTimeout))
	if err := writeDests(c, mine, lines); err != nil {
		return nil, err
	}
	rem, err := readDests(c, len(mine), lines)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(doneMsg); err != nil {
		return nil, fmt.Errorf("%w: couldn't send done: %v", ErrExchange, err)
	}
	return rem, nil
}

// ServerExchange runs the server side on c: read the client's
// destinations, connect (move the QPs to RTS), send mine, read "done".
func ServerExchange(ctx context.Context, c net.Conn, mine []Dest, lines int, connect func([]Dest) error) ([]Dest, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	c.SetDeadline(time.Now().Add(exchangeTimeout))
	rem, err := readDests(c, len(mine), lines)
	if err != nil {
		return nil, err
	}
	if err := connect(rem); err != nil {
		return nil, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	if err := writeDests(c, mine, lines); err != nil {
		return nil, err
	}
	var done [len("done") + 1]byte
	if _, err := io.ReadFull(c, done[:]); err != nil {
		return nil, fmt.Errorf("%w: couldn't read done: %v", ErrExchange, err)
	}
	if !bytes.Equal(done[:], doneMsg) {
		return nil, fmt.Errorf("%w: got %q instead of done", ErrExchange, done[:])
	}
	return rem, nil
}
