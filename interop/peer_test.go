//go:build interop

package interop

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/peer"
)

func TestBootOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, err := peer.Boot(ctx, peer.Config{Logf: t.Logf, KeepWorkDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	r, err := p.Run(ctx, "ibv_devinfo -v -d rxe0; cat /sys/class/infiniband/rxe0/ports/1/gids/1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status %d in %v\n%s\n%s", r.Status, r.Elapsed, r.Stdout, r.Stderr)
}
