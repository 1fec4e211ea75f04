package policy

import (
	"errors"
	"strings"
	"testing"
)

const samplePolicy = `
# port groups by GUID
port-groups
    port-group
        name: Storage
        use: the storage targets
        port-guid: 0x0002c90300000010, 0x0002c90300000020-0x0002c9030000002f
    end-port-group
    port-group
        name: Compute
        port-guid: 0x0002c90300000001-0x0002c90300000008
    end-port-group
end-port-groups

qos-levels
    qos-level
        name: Bulk
        sl: 1
    end-qos-level
    qos-level
        name: Latency
        use: for MPI
        sl: 7
    end-qos-level
end-qos-levels

qos-match-rules
    qos-match-rule
        source: Compute
        destination: Storage
        service-id: 0x1000-0x10ff
        qos-level-name: Bulk
    end-qos-match-rule
    qos-match-rule
        qos-class: 3, 5-6
        qos-level-name: Latency
    end-qos-match-rule
end-qos-match-rules

qos-ulps
    default                                  : 2
    sdp, port-num 30000                      : 3
    rds                                      : 4
    any, pkey 0x8005                         : 5
    srp, target-port-guid 0x0002c90300000099 : 6
    any, source-target-port-guid 0x42        : 8
    ipoib                                    : 9
end-qos-ulps
`

func TestQoSPolicySL(t *testing.T) {
	p, err := ParseQoSPolicy(strings.NewReader(samplePolicy))
	if err != nil {
		t.Fatal(err)
	}
	compute, storage := uint64(0x0002c90300000003), uint64(0x0002c90300000021)
	for _, c := range []struct {
		name string
		q    PathQoS
		sl   uint8
	}{
		{"match rule: Compute to Storage, its service", PathQoS{ServiceID: 0x1042, HasServiceID: true, Source: compute, Dest: storage, PKey: 0xffff}, 1},
		{"the other way round: no rule, the default", PathQoS{ServiceID: 0x1042, HasServiceID: true, Source: storage, Dest: compute, PKey: 0x8002}, 2},
		{"no service ID in the query: the rule needs one", PathQoS{Source: compute, Dest: storage, PKey: 0x8002}, 2},
		{"qos-class 5", PathQoS{QoSClass: 5, HasQoSClass: true, PKey: 0xffff}, 7},
		{"qos-class 4: none", PathQoS{QoSClass: 4, HasQoSClass: true, PKey: 0x8002}, 2},
		{"the default partition: ipoib's line", PathQoS{QoSClass: 4, HasQoSClass: true, PKey: 0xffff}, 9},
		{"sdp port 30000", PathQoS{ServiceID: 0x10000 + 30000, HasServiceID: true, PKey: 0xffff}, 3},
		{"rds: rdma_cm TCP port space", PathQoS{ServiceID: 0x0000000001064A4A, HasServiceID: true, PKey: 0xffff}, 4},
		{"P_Key 0x0005, limited member", PathQoS{PKey: 0x0005}, 5},
		{"srp target", PathQoS{Dest: 0x0002c90300000099, PKey: 0xffff}, 6},
		{"source-target GUID as destination", PathQoS{Dest: 0x42, PKey: 0xffff}, 8},
		{"ipoib's default partition", PathQoS{PKey: 0xffff & 0x7fff}, 9},
	} {
		if sl, ok := p.SL(c.q); !ok || sl != c.sl {
			t.Errorf("%s: SL %d (%v), want %d", c.name, sl, ok, c.sl)
		}
	}
	empty, err := ParseQoSPolicy(strings.NewReader("qos-ulps\n  any, pkey 0x1 : 3\nend-qos-ulps\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := empty.SL(PathQoS{PKey: 0xffff}); ok {
		t.Error("an SL with no rule matching and no default")
	}
}

func TestQoSPolicyErrors(t *testing.T) {
	for _, c := range []struct{ name, text string }{
		{"outside a section", "sl: 3\n"},
		{"qos-setup", "qos-setup\nend-qos-setup\n"},
		{"unknown level key", "qos-levels\nqos-level\nname: a\nsl: 1\nmtu-limit: 4\nend-qos-level\nend-qos-levels\n"},
		{"SL too big", "qos-levels\nqos-level\nname: a\nsl: 16\nend-qos-level\nend-qos-levels\n"},
		{"no such level", "qos-match-rules\nqos-match-rule\nqos-level-name: x\nend-qos-match-rule\nend-qos-match-rules\n"},
		{"no such group", "qos-levels\nqos-level\nname: a\nsl: 1\nend-qos-level\nend-qos-levels\nqos-match-rules\nqos-match-rule\nsource: G\nqos-level-name: a\nend-qos-match-rule\nend-qos-match-rules\n"},
		{"bad range", "qos-ulps\nany, service-id 0x10-0x1 : 1\nend-qos-ulps\n"},
		{"unknown ULP", "qos-ulps\nmpi : 1\nend-qos-ulps\n"},
		{"unsupported criterion", "qos-ulps\nany, port-num 4 : 1\nend-qos-ulps\n"},
		{"no SL", "qos-ulps\nany, pkey 1\nend-qos-ulps\n"},
		{"unterminated", "qos-ulps\ndefault : 1\n"},
		{"repeated key", "port-groups\nport-group\nname: a\nname: b\nend-port-group\nend-port-groups\n"},
		{"group without GUIDs", "port-groups\nport-group\nname: a\nend-port-group\nend-port-groups\n"},
	} {
		_, err := ParseQoSPolicy(strings.NewReader(c.text))
		var se *SyntaxError
		if !errors.Is(err, ErrSyntax) || !errors.As(err, &se) || se.Line == 0 {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func FuzzParseQoSPolicy(f *testing.F) {
	f.Add(samplePolicy)
	f.Add("qos-ulps\ndefault : 1\nend-qos-ulps\n")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseQoSPolicy(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error not wrapping ErrSyntax: %v", err)
			}
			return
		}
		if sl, ok := p.SL(PathQoS{PKey: 0xffff, HasServiceID: true, ServiceID: 7}); ok && sl > 15 {
			t.Fatalf("SL %d", sl)
		}
	})
}

// ParseQoS keeps the qos_policy_file it names.
func TestQoSPolicyFileOption(t *testing.T) {
	q, err := ParseQoS(strings.NewReader("qos TRUE\nqos_policy_file /etc/opensm/qos-policy.conf\n"))
	if err != nil || q.PolicyFile != "/etc/opensm/qos-policy.conf" {
		t.Errorf("PolicyFile %q, %v", q.PolicyFile, err)
	}
	long := "qos-ulps\n" + strings.Repeat("# "+strings.Repeat("x", 1000)+"\n", maxPolicyBytes/1000+2) + "end-qos-ulps\n"
	if _, err := ParseQoSPolicy(strings.NewReader(long)); !errors.Is(err, ErrSyntax) {
		t.Errorf("a file past %d bytes: %v", maxPolicyBytes, err)
	}
}
