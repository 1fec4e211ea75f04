package ib

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/link"
)

// JoinGroup and LeaveGroup keep the set of MGIDs; a unicast address, a
// second join and leaving a group not joined are refused.
func TestJoinGroup(t *testing.T) {
	r := newRxLink(t, testAttr())
	g := netip.MustParseAddr("ff12:401b:ffff::1")
	if err := r.l.JoinGroup(g); err != nil {
		t.Fatal(err)
	}
	if err := r.l.JoinGroup(g); !errors.Is(err, link.ErrAddress) {
		t.Errorf("second join: %v", err)
	}
	if err := r.l.JoinGroup(netip.MustParseAddr("fe80::1")); !errors.Is(err, link.ErrAddress) {
		t.Errorf("join of a unicast GID: %v", err)
	}
	if err := r.l.LeaveGroup(g); err != nil {
		t.Fatal(err)
	}
	if err := r.l.LeaveGroup(g); !errors.Is(err, link.ErrAddress) {
		t.Errorf("second leave: %v", err)
	}
}
