package archtest

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/softrdma/softrdma"

// layers places every package of the module (docs/DESIGN.md, "Layers"). A
// package imports only packages of a lower layer; interop/... may also
// import its own packages. A new package must be given a layer here.
var layers = map[string]int{
	// The CRC-32 the wire format's checksums use.
	"internal/crc": -1,
	"wire":         0,
	// Foundations over the wire format.
	"wire/mad": 1, "internal/netif": 1, "internal/mem": 1, "link": 1,
	"verbs/internal/requester": 1, "internal/leakcheck": 1,
	// The perftest -R rerun rule of the capi and interop tests.
	"internal/perftestrace": 1,
	// Links.
	"link/loop": 2, "link/udp": 2, "link/fault": 2, "link/pcap": 2, "link/linktest": 2,
	// An InfiniBand port (LRH, VCRC, the HCA port's checks) over a cable or a fabric.
	"link/ib": 2,
	// The link level of an InfiniBand link (virtual lanes, credits).
	"fabric/vl": 2,
	// The verbs API and engine, the emulated InfiniBand fabric, connection
	// management, rdma_cm.
	"verbs": 3, "fabric": 3, "cm": 4, "roce": 4, "metrics": 4, "rdmacm": 5,
	// The fabric's server of Linux ibsim's client protocol.
	"fabric/ibsim": 4,
	// HCA ports of a fabric served to other processes and hosts.
	"fabric/remote": 4,
	// The subnet manager, its subnet administrator, and the partition and
	// QoS policies it applies.
	"sm": 5, "sm/sa": 6, "sm/policy": 2, "sm/smtest": 6,
	// The tools' engines and the command.
	"cmd/softrdma/internal/dump": 6, "cmd/softrdma/internal/tool": 6,
	"cmd/softrdma/internal/pingpong": 7, "cmd/softrdma/internal/perftest": 7,
	"cmd/softrdma": 8, "examples/hello": 8, "bench": 8,
	// The C ABI library (libibverbs.so.1), a cgo command over the stack.
	"capi/ibverbs": 8,
	// The interop suite and this test.
	"interop": 9, "internal/archtest": 9,
}

// stdlibOnly lists packages that import nothing outside the standard
// library and the module.
var stdlibOnly = []string{"wire", "wire/mad", "fabric", "internal/mem", "link", "link/ib", "verbs", "cm", "rdmacm", "verbs/internal/requester"}

// pure lists packages that are state machines only: no clock, no locks, no
// I/O. They import nothing but these (DESIGN.md, "The requester core").
var pure = map[string][]string{
	"verbs/internal/requester": {"math/bits", module + "/wire"},
}

// forbidden lists imports a package may not make although the layers allow
// them: verbs knows links only through the link.Link interface (devices on
// UDP are opened by roce).
var forbidden = map[string][]string{
	"verbs": {"link/udp", "link/loop", "link/pcap", "link/ib"},
}

func layerOf(pkg string) (int, bool) {
	if l, ok := layers[pkg]; ok {
		return l, true
	}
	if pkg == "interop" || strings.HasPrefix(pkg, "interop/") {
		return layers["interop"], true
	}
	return 0, false
}

func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Every file whatever its build constraints: the rules hold on every
	// GOOS.
	ctx := build.Default
	ctx.UseAllFiles = true
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		p, err := ctx.ImportDir(path, build.ImportComment)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, path)
		pkg := filepath.ToSlash(rel)
		l, ok := layerOf(pkg)
		if !ok {
			t.Errorf("package %s has no layer in the import rules (docs/DESIGN.md)", pkg)
			return nil
		}
		seen++
		strict := false
		for _, s := range stdlibOnly {
			strict = strict || s == pkg
		}
		if allowed, ok := pure[pkg]; ok {
			for _, imp := range p.Imports {
				if !slices.Contains(allowed, imp) {
					t.Errorf("%s imports %s: a pure state machine imports only %v", pkg, imp, allowed)
				}
			}
		}
		// The Go stack is pure Go: cgo only in the C ABI library.
		if slices.Contains(p.Imports, "C") && !strings.HasPrefix(pkg, "capi/") {
			t.Errorf("%s imports \"C\": only the C ABI library (capi/...) uses cgo", pkg)
		}
		for _, imp := range p.Imports {
			dep, inModule := strings.CutPrefix(imp, module+"/")
			if !inModule {
				if strict && strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
					t.Errorf("%s imports %s: it may import only the standard library and the module", pkg, imp)
				}
				continue
			}
			if slices.Contains(forbidden[pkg], dep) {
				t.Errorf("%s imports %s, which DESIGN.md forbids", pkg, dep)
			}
			dl, ok := layerOf(dep)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which has no layer", pkg, dep)
			case l == layers["interop"] && dl == l && strings.HasPrefix(pkg, "interop") && strings.HasPrefix(dep, "interop"):
			case dl >= l:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports go to lower layers only", pkg, l, dep, dl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < len(layers) {
		t.Errorf("found %d packages, the rules name %d: a package was removed or renamed", seen, len(layers))
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal("not at the module root:", err)
	}
}
