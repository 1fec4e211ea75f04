//go:build linux

package peer

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const depText = `kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko: kernel/net/ipv6/ip6_udp_tunnel.ko kernel/net/ipv4/udp_tunnel.ko kernel/drivers/infiniband/core/ib_uverbs.ko kernel/drivers/infiniband/core/ib_core.ko
kernel/drivers/infiniband/core/ib_uverbs.ko: kernel/drivers/infiniband/core/ib_core.ko
kernel/drivers/infiniband/core/ib_core.ko:
kernel/net/ipv4/udp_tunnel.ko:
kernel/net/ipv6/ip6_udp_tunnel.ko:
kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko.xz
kernel/drivers/net/net_failover.ko.xz: kernel/net/core/failover.ko.xz
kernel/net/core/failover.ko.xz:
`

func writeDep(t *testing.T, text string) map[string][]string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "modules.dep")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	deps, err := readModulesDep(p)
	if err != nil {
		t.Fatal(err)
	}
	return deps
}

func TestModuleOrder(t *testing.T) {
	deps := writeDep(t, depText)
	got, err := moduleOrder([]string{"virtio-net", "virtio_pci", "rdma_rxe", "ib_core"}, deps, "kernel/drivers/virtio/virtio_pci.ko\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/net/core/failover.ko.xz",
		"kernel/drivers/net/net_failover.ko.xz",
		"kernel/drivers/net/virtio_net.ko.xz",
		"kernel/net/ipv6/ip6_udp_tunnel.ko",
		"kernel/net/ipv4/udp_tunnel.ko",
		"kernel/drivers/infiniband/core/ib_core.ko",
		"kernel/drivers/infiniband/core/ib_uverbs.ko",
		"kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := moduleOrder([]string{"no_such_module"}, deps, ""); err == nil {
		t.Error("a missing module gave no error")
	}
}

func TestReadModulesDepTruncated(t *testing.T) {
	// Cut anywhere, the file still parses into whole lines' entries; a cut
	// line loses only its own dependency list.
	for n := 0; n <= len(depText); n += 7 {
		deps := writeDep(t, depText[:n])
		for m := range deps {
			if !strings.HasPrefix(m, "kernel/") {
				t.Fatalf("cut at %d: module %q", n, m)
			}
		}
	}
	if _, err := readModulesDep(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/a/crc32-pclmul.ko":  "crc32_pclmul",
		"kernel/b/virtio_net.ko.xz": "virtio_net",
		"rdma_rxe":                  "rdma_rxe",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

func TestCheckHostNotRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root")
	}
	if err := CheckHost(); !errors.Is(err, ErrNotRoot) {
		t.Errorf("CheckHost as uid %d: %v, want ErrNotRoot", os.Geteuid(), err)
	}
}
