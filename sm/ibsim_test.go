package sm

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/wire/mad"
)

// The SM over ibsim's client protocol, against softrdma's fabric served by
// package fabric/ibsim (the path "softrdma sm" takes to "softrdma fabric
// -sm=false"): the same sweep as over FabricTransport, with the server
// marking the TIDs' top bits with the client's slot.
func TestIbsimTransport(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	sock := fmt.Sprintf("softrdma-sm-unit-%d", os.Getpid())
	srv, err := ibsim.NewServer(ibsim.FabricBackend(f.Fabric), ibsim.Config{SockName: sock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
	}()
	tr, err := IbsimTransport(ctx, ibsim.ClientConfig{SockName: sock, Node: "Hca3", ID: uint32(os.Getpid())*16 + 500})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(tr, Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// The server sets IsSM for the client's port, as ibsim does.
	if pi := portInfo(t, f, f.NodeByName("Hca3"), 1); pi.CapabilityMask&mad.PortCapIsSM == 0 {
		t.Errorf("IsSM not set: capability mask %#x", pi.CapabilityMask)
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if err := m.Sweep(sctx); err != nil {
		t.Fatal(err)
	}
	checkSubnet(t, f, m, 0)
	if sn := m.Subnet(); sn.PortByGUID(f.NodeByName("Hca3").PortGUID(1)).LID() != sn.SMLID {
		t.Errorf("SM LID %d is not Hca3's", sn.SMLID)
	}
	if err := m.Sweep(sctx); err != nil || m.Stats().LastSets != 0 {
		t.Errorf("second sweep: %v, %+v", err, m.Stats())
	}
}
