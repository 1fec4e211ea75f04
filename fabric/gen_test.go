package fabric

import (
	"fmt"
	"strings"
)

// fatTree writes a two-level fat tree: leaves leaf switches with hosts CAs
// each, every leaf joined to every one of spines spine switches.
func fatTree(spines, leaves, hosts int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# two-level fat tree: %d spines, %d leaves, %d hosts per leaf\n\n", spines, leaves, hosts)
	for s := 1; s <= spines; s++ {
		fmt.Fprintf(&b, "Switch\t%d \"Spine%d\"\n", leaves, s)
		for l := 1; l <= leaves; l++ {
			fmt.Fprintf(&b, "[%d]\t\"Leaf%d\"[%d]\n", l, l, hosts+s)
		}
		b.WriteString("\n")
	}
	for l := 1; l <= leaves; l++ {
		fmt.Fprintf(&b, "Switch\t%d \"Leaf%d\"\n", hosts+spines, l)
		for h := 1; h <= hosts; h++ {
			fmt.Fprintf(&b, "[%d]\t\"Hca%d\"[1]\n", h, (l-1)*hosts+h)
		}
		for s := 1; s <= spines; s++ {
			fmt.Fprintf(&b, "[%d]\t\"Spine%d\"[%d]\n", hosts+s, s, l)
		}
		b.WriteString("\n")
	}
	for l := 1; l <= leaves; l++ {
		for h := 1; h <= hosts; h++ {
			fmt.Fprintf(&b, "Hca\t1 \"Hca%d\"\n[1]\t\"Leaf%d\"[%d]\n\n", (l-1)*hosts+h, l, h)
		}
	}
	return b.String()
}
