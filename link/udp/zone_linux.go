// IPv6 zones as interface indexes, for the sockaddrs the link builds itself.

package udp

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// zoneTTL is how long a zone's index is trusted: an interface can be
// deleted and made again under the same name with another index.
const zoneTTL = time.Minute

// zones caches zoneIndex's answers by zone.
var zones struct {
	mu sync.Mutex
	m  map[string]zoneEntry
}

type zoneEntry struct {
	index uint32
	at    time.Time
}

// zoneIndex returns the index of the interface an IPv6 zone names: its
// number, or the index of the interface of that name.
func zoneIndex(zone string) (uint32, error) {
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	zones.mu.Lock()
	defer zones.mu.Unlock()
	now := time.Now()
	if e, ok := zones.m[zone]; ok && now.Sub(e.at) < zoneTTL {
		return e.index, nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, fmt.Errorf("udp: zone %q: %w", zone, err)
	}
	if zones.m == nil {
		zones.m = make(map[string]zoneEntry)
	}
	zones.m[zone] = zoneEntry{uint32(ifi.Index), now}
	return uint32(ifi.Index), nil
}
