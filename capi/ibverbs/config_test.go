//go:build capi

package main

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseDevices(t *testing.T) {
	type dev struct {
		name  string
		addrs []string
		port  uint16
	}
	for _, c := range []struct {
		spec, port string
		want       []dev
	}{
		{"127.0.0.1", "", []dev{{"softrdma0", []string{"127.0.0.1"}, 4791}}},
		{"127.0.0.2,::ffff:127.0.0.1", "4800", []dev{{"softrdma0", []string{"127.0.0.2", "127.0.0.1"}, 4800}}},
		{"127.0.0.1;127.0.0.2", "", []dev{{"softrdma0", []string{"127.0.0.1"}, 4791}, {"softrdma1", []string{"127.0.0.2"}, 4791}}},
		{" a=127.0.0.1 \\t b=127.0.0.2 ", "", []dev{{"a", []string{"127.0.0.1"}, 4791}, {"b", []string{"127.0.0.2"}, 4791}}},
		{"lo", "", []dev{{"softrdma_lo", nil, 4791}}},
		{"mine=softrdma_lo", "", []dev{{"mine", nil, 4791}}},
	} {
		got, err := parseDevices(strings.ReplaceAll(c.spec, "\\t", "\t"), c.port)
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%q: %d devices, want %d", c.spec, len(got), len(c.want))
			continue
		}
		for i, w := range c.want {
			g := got[i]
			if g.name != w.name || g.opts.Name != w.name || g.opts.Port != w.port {
				t.Errorf("%q: device %d is %s on port %d, want %s on %d", c.spec, i, g.name, g.opts.Port, w.name, w.port)
			}
			if w.addrs == nil { // an interface: its addresses in GID order
				if g.ifname != "lo" || !slices.Contains(g.addrs, netip.MustParseAddr("127.0.0.1")) {
					t.Errorf("%q: interface %q with %v", c.spec, g.ifname, g.addrs)
				}
				continue
			}
			var as []string
			for _, a := range g.addrs {
				as = append(as, a.String())
			}
			if !slices.Equal(as, w.addrs) {
				t.Errorf("%q: device %d has %v, want %v", c.spec, i, as, w.addrs)
			}
		}
	}
}

func TestParseDevicesErrors(t *testing.T) {
	for _, c := range []struct{ spec, port, msg string }{
		{"=127.0.0.1", "", "NAME=SPEC"},
		{"x=", "", "NAME=SPEC"},
		{"0.0.0.0", "", "not a unicast IP address"},
		{"127.0.0.1,224.0.0.1", "", "not a unicast IP address"},
		{"127.0.0.1,nonsense", "", "not a unicast IP address"},
		{"nosuchif0", "", `no interface "nosuchif0"`},
		{"softrdma_nosuchif0", "", `no interface "nosuchif0"`},
		{"127.0.0.1 a=127.0.0.2 a=127.0.0.3", "", "names device a twice"},
		{strings.Repeat("n", 64) + "=127.0.0.1", "", "longer than 63 bytes"},
		{"127.0.0.1", "0", "SOFTRDMA_ROCE_PORT"},
		{"127.0.0.1", "65536", "SOFTRDMA_ROCE_PORT"},
		{"127.0.0.1", "x", "SOFTRDMA_ROCE_PORT"},
	} {
		_, err := parseDevices(c.spec, c.port)
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q port %q: %v, want errConfig saying %q", c.spec, c.port, err, c.msg)
		}
	}
}

// FuzzParseDevices checks that any configuration either fails with
// errConfig (or the interface listing's error) or gives devices with
// distinct names that fit ibv_device's name and at least one address.
func FuzzParseDevices(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "a=127.0.0.1,::1;lo", "softrdma_lo", "=", ";;", "x=y=z", "127.0.0.1,", ""} {
		f.Add(s, "")
	}
	f.Add("127.0.0.1", "4791")
	f.Fuzz(func(t *testing.T, spec, port string) {
		devs, err := parseDevices(spec, port)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, d := range devs {
			if d.name == "" || len(d.name) > 63 || seen[d.name] || len(d.addrs) == 0 || d.opts.Port == 0 {
				t.Fatalf("%q %q: bad device %+v", spec, port, d)
			}
			seen[d.name] = true
		}
	})
}
