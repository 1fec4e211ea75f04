package cm_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/sa"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire/mad"
)

// A port on an InfiniBand fabric joins a multicast group through the SA
// (softrdma's SM and SA at Hca1 of a two-switch fabric): the SA creates the
// group and answers with its MLID and Q_Key; the leave deletes it.
func ExampleManager_JoinMulticast() {
	text, err := os.ReadFile("../fabric/testdata/net.2sw2path4hca")
	if err != nil {
		panic(err)
	}
	topo, err := fabric.ParseTopology(strings.NewReader(string(text)), "net.2sw2path4hca")
	if err != nil {
		panic(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	t, err := sm.FabricTransport(f, f.NodeByName("Hca1"), 1)
	if err != nil {
		panic(err)
	}
	x, err := sa.Attach(t, sm.Config{Logger: quiet}, sa.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := x.Sweep(ctx); err != nil {
		panic(err)
	}

	p, err := f.ConnectHCA(f.NodeByName("Hca2"), 1)
	if err != nil {
		panic(err)
	}
	l, err := ib.New(p)
	if err != nil {
		panic(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "Hca2", Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	for {
		if pa, err := d.QueryPort(1); err == nil && pa.State == verbs.PortActive {
			break
		}
		time.Sleep(time.Millisecond)
	}
	m, err := cm.New(d, &cm.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer m.Close()

	q := mad.MCMemberRecord{MGID: mad.GID{0xff, 0x12, 0x60, 0x01, 0xff, 0xff, 15: 0x34},
		PortGID: mad.GID(d.GIDs()[0]), QKey: 0x1234, JoinState: mad.JoinFullMember}
	mask := uint64(mad.MCMemberRecCompMGID | mad.MCMemberRecCompPortGID | mad.MCMemberRecCompJoinState)
	rec, err := m.JoinMulticast(ctx, q, mask|mad.MCMemberRecCompQKey)
	if err != nil {
		panic(err)
	}
	fmt.Printf("joined: MLID %#x, Q_Key %#x, SA groups %d\n", rec.MLID, rec.QKey, len(x.SA.Groups()))
	if err := m.LeaveMulticast(ctx, q, mask); err != nil {
		panic(err)
	}
	fmt.Printf("left: SA groups %d\n", len(x.SA.Groups()))
	// Output:
	// joined: MLID 0xc000, Q_Key 0x1234, SA groups 1
	// left: SA groups 0
}
