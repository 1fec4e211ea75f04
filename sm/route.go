package sm

import (
	"cmp"
	"slices"

	"github.com/softrdma/softrdma/wire/mad"
)

// graph is the switches of a subnet and the links between them.
type graph struct {
	sw  []*Node
	idx map[*Node]int
	// nbr[i] lists switch i's ports linked to another switch.
	nbr [][]edge
}

type edge struct {
	port int
	to   int
}

func newGraph(nodes []*Node) *graph {
	g := &graph{idx: map[*Node]int{}}
	for _, n := range nodes {
		if n.Switch != nil {
			g.idx[n] = len(g.sw)
			g.sw = append(g.sw, n)
		}
	}
	g.nbr = make([][]edge, len(g.sw))
	for i, n := range g.sw {
		for _, p := range n.Ports[1:] {
			if p.Remote != nil && p.Remote.Node.Switch != nil {
				g.nbr[i] = append(g.nbr[i], edge{p.Num, g.idx[p.Remote.Node]})
			}
		}
	}
	return g
}

// bfs returns the hop counts from switch t to every switch (-1: none),
// over the links allowed by ok(from, to) walked backwards from t: dist[u]
// is the length of the shortest path u -> ... -> t whose every hop (a, b)
// has ok(a, b).
func (g *graph) bfs(t int, ok func(a, b int) bool) []int {
	dist := make([]int, len(g.sw))
	for i := range dist {
		dist[i] = -1
	}
	dist[t] = 0
	q := []int{t}
	for len(q) > 0 {
		v := q[0]
		q = q[1:]
		for _, e := range g.nbr[v] {
			u := e.to // u -> v is a hop if ok(u, v)
			if dist[u] < 0 && ok(u, v) {
				dist[u] = dist[v] + 1
				q = append(q, u)
			}
		}
	}
	return dist
}

// target is where a LID leads: a switch, and the port of that switch the
// LID leaves by (0 for the switch's own LID).
type target struct {
	sw   int
	port int
	lid  uint16
	lmc  uint8
}

// router picks each switch's output port toward a target switch: next
// returns the ports of switch s that lead one hop nearer along legal
// paths (none if s cannot reach it).
type router interface {
	next(s, t int) []int
}

// minHop routes along shortest paths.
type minHop struct {
	g    *graph
	dist [][]int // dist[t][s]
}

func newMinHop(g *graph) *minHop {
	r := &minHop{g: g, dist: make([][]int, len(g.sw))}
	all := func(a, b int) bool { return true }
	for t := range g.sw {
		r.dist[t] = g.bfs(t, all)
	}
	return r
}

func (r *minHop) next(s, t int) []int {
	d := r.dist[t]
	if d[s] <= 0 {
		return nil
	}
	var ports []int
	for _, e := range r.g.nbr[s] {
		if d[e.to] == d[s]-1 {
			ports = append(ports, e.port)
		}
	}
	return ports
}

// upDown routes along up*down* paths. Switches are ranked by their hop
// distance from the roots, and ordered by (rank, node GUID); a hop toward
// a smaller key is up, toward a larger key down. A route may go up any
// number of hops and then down, never down then up. Since every switch
// that has a down-only path to the target routes down, and the others
// route up, a packet following the LFTs takes a legal path from anywhere.
type upDown struct {
	g     *graph
	key   []int // position of each switch in (rank, GUID) order
	rank  []int
	ddown [][]int // ddown[t][s]: hops of the shortest down-only path
	dall  [][]int // dall[t][s]: hops of the route s takes
}

// roots are the switches farthest from the switches with CAs (the spines
// of a fat tree); when every switch has CAs, all of them.
func roots(g *graph) []int {
	leaf := make([]bool, len(g.sw))
	dist := make([]int, len(g.sw))
	var q []int
	for i, n := range g.sw {
		dist[i] = -1
		for _, p := range n.Ports[1:] {
			if p.Remote != nil && p.Remote.Node.Switch == nil {
				leaf[i] = true
			}
		}
		if leaf[i] {
			dist[i] = 0
			q = append(q, i)
		}
	}
	if len(q) == 0 && len(g.sw) > 0 {
		dist[0] = 0
		q = append(q, 0)
	}
	for len(q) > 0 {
		v := q[0]
		q = q[1:]
		for _, e := range g.nbr[v] {
			if dist[e.to] < 0 {
				dist[e.to] = dist[v] + 1
				q = append(q, e.to)
			}
		}
	}
	top := 0
	for _, d := range dist {
		top = max(top, d)
	}
	var rs []int
	for i, d := range dist {
		if d == top {
			rs = append(rs, i)
		}
	}
	return rs
}

func newUpDown(g *graph) *upDown {
	n := len(g.sw)
	r := &upDown{g: g, key: make([]int, n), rank: make([]int, n), ddown: make([][]int, n), dall: make([][]int, n)}
	for i := range r.rank {
		r.rank[i] = -1
	}
	q := roots(g)
	for _, i := range q {
		r.rank[i] = 0
	}
	for len(q) > 0 {
		v := q[0]
		q = q[1:]
		for _, e := range g.nbr[v] {
			if r.rank[e.to] < 0 {
				r.rank[e.to] = r.rank[v] + 1
				q = append(q, e.to)
			}
		}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(r.rank[a], r.rank[b]); c != 0 {
			return c
		}
		return cmp.Compare(g.sw[a].Info.NodeGUID, g.sw[b].Info.NodeGUID)
	})
	for k, i := range order {
		r.key[i] = k
	}
	down := func(a, b int) bool { return r.key[b] > r.key[a] }
	for t := range n {
		dd := g.bfs(t, down)
		da := make([]int, n)
		for _, s := range order { // up-neighbours come first
			da[s] = dd[s]
			if da[s] >= 0 {
				continue
			}
			for _, e := range g.nbr[s] {
				if !down(s, e.to) && da[e.to] >= 0 && (da[s] < 0 || da[e.to]+1 < da[s]) {
					da[s] = da[e.to] + 1
				}
			}
		}
		r.ddown[t], r.dall[t] = dd, da
	}
	return r
}

func (r *upDown) next(s, t int) []int {
	var ports []int
	dd, da := r.ddown[t], r.dall[t]
	if s == t || da[s] < 0 {
		return nil
	}
	for _, e := range r.g.nbr[s] {
		if dd[s] >= 0 {
			if r.key[e.to] > r.key[s] && dd[e.to] == dd[s]-1 {
				ports = append(ports, e.port)
			}
		} else if r.key[e.to] < r.key[s] && da[e.to] == da[s]-1 {
			ports = append(ports, e.port)
		}
	}
	return ports
}

// complete reports whether every switch reaches every other.
func complete(r router, n int) bool {
	for t := range n {
		for s := range n {
			if s != t && len(r.next(s, t)) == 0 {
				return false
			}
		}
	}
	return true
}

// computeLFTs returns each switch's LFT (len top+1, rounded up to whole
// 64-entry blocks; mad.LinearFTNoRoute where there is no route) for the
// LIDs given. Among equal choices a switch takes the port that carries the
// fewest LIDs so far, preferring ports the target's other LIDs (LMC) do
// not use yet, then the lowest port number.
func (m *Manager) computeLFTs(nodes []*Node, eps []*Port, lids map[uint64]uint16, top uint16) (map[*Node][]byte, string) {
	g := newGraph(nodes)
	var r router
	engine := m.cfg.Routing
	if engine == RoutingUpDown {
		ud := newUpDown(g)
		if complete(ud, len(g.sw)) {
			r = ud
		} else {
			m.log.Warn("sm: up/down cannot route every switch pair from the roots found; min-hop instead")
			engine = RoutingMinHop
		}
	}
	if r == nil {
		r = newMinHop(g)
	}
	size := (int(top)/mad.LinearFTSize + 1) * mad.LinearFTSize
	lfts := make(map[*Node][]byte, len(g.sw))
	load := make([][]int, len(g.sw))
	for i, n := range g.sw {
		t := make([]byte, size)
		for j := range t {
			t[j] = mad.LinearFTNoRoute
		}
		lfts[n] = t
		load[i] = make([]int, len(n.Ports))
	}
	var targets []target
	for _, p := range eps {
		lid, ok := lids[p.GUID]
		if !ok {
			continue
		}
		switch {
		case p.Node.Switch != nil:
			targets = append(targets, target{sw: g.idx[p.Node], port: 0, lid: lid})
		case p.Remote != nil && p.Remote.Node.Switch != nil:
			targets = append(targets, target{sw: g.idx[p.Remote.Node], port: p.Remote.Num, lid: lid, lmc: m.lmcOf(p)})
		}
	}
	slices.SortFunc(targets, func(a, b target) int { return cmp.Compare(a.lid, b.lid) })
	usedBy := make([]map[int]bool, len(g.sw))
	for _, tg := range targets {
		for s := range g.sw {
			usedBy[s] = nil
		}
		for k := uint16(0); k < 1<<tg.lmc; k++ {
			lid := tg.lid + k
			for s, n := range g.sw {
				if s == tg.sw {
					lfts[n][lid] = byte(tg.port)
					continue
				}
				best := -1
				for _, port := range r.next(s, tg.sw) {
					if best < 0 || better(port, best, load[s], usedBy[s]) {
						best = port
					}
				}
				if best < 0 {
					continue
				}
				lfts[n][lid] = byte(best)
				load[s][best]++
				if usedBy[s] == nil {
					usedBy[s] = map[int]bool{}
				}
				usedBy[s][best] = true
			}
		}
	}
	return lfts, engine
}

func better(a, b int, load []int, used map[int]bool) bool {
	if used[a] != used[b] {
		return !used[a]
	}
	if load[a] != load[b] {
		return load[a] < load[b]
	}
	return a < b
}
