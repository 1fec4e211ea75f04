//go:build capi

package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Debian's python3-pyverbs: the Python binding and rdma-core's test suite
// (some of its files gzipped).
const (
	pyverbsPython = "/usr/bin/python3" // the interpreter pyverbs is built for
	pyverbsSuite  = "/usr/share/doc/rdma-core/tests"
)

// unpackSuite copies the suite into dir, gunzipping its .py.gz files.
func unpackSuite(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(pyverbsSuite)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".py") && !strings.HasSuffix(name, ".py.gz") {
			continue
		}
		in, err := os.Open(filepath.Join(pyverbsSuite, name))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = in
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(in)
			if err != nil {
				in.Close()
				t.Fatalf("%s: %v", name, err)
			}
			r, name = zr, strings.TrimSuffix(name, ".gz")
		}
		out, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			_, err = io.Copy(out, r)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		in.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// expectedPasses reads testdata/pyverbs-pass.txt.
func expectedPasses(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("testdata/pyverbs-pass.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			names = append(names, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestPyverbs runs rdma-core's own Python test suite, as Debian's
// python3-pyverbs ships it, through Debian's pyverbs on the library
// (device softrdma0 on 127.0.0.1), and fails if a test that
// testdata/pyverbs-pass.txt lists does not pass: failed, errored, skipped
// or missing. Tests that pass without being listed are logged, and so
// are failures of unlisted tests. About 10 s.
func TestPyverbs(t *testing.T) {
	built(t)
	need(t, pyverbsPython)
	need(t, filepath.Join(pyverbsSuite, "run_tests.py"))
	want := expectedPasses(t)
	dir := t.TempDir()
	unpackSuite(t, dir)
	driver, err := filepath.Abs("testdata/pyverbs_run.py")
	if err != nil {
		t.Fatal(err)
	}
	resFile := filepath.Join(dir, "results.json")
	port, _ := freePorts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := command(ctx, "127.0.0.1", port, pyverbsPython, driver, dir, resFile, "--dev", "softrdma0")
	cmd.Dir = dir
	out, runErr := cmd.CombinedOutput()
	data, err := os.ReadFile(resFile)
	if err != nil {
		t.Fatalf("the suite wrote no results (%v): %v\n%s", runErr, err, out)
	}
	var got map[string][2]string
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("results: %v", err)
	}
	counts := map[string]int{}
	for _, r := range got {
		counts[r[0]]++
	}
	t.Logf("%d tests: %d pass, %d fail, %d error, %d skip", len(got), counts["pass"], counts["fail"], counts["error"], counts["skip"])
	listed := map[string]bool{}
	for _, name := range want {
		listed[name] = true
		if r, ok := got[name]; !ok {
			t.Errorf("%s: did not run", name)
		} else if r[0] != "pass" {
			t.Errorf("%s: %s %s", name, r[0], r[1])
		}
	}
	var extra []string
	for name, r := range got {
		if !listed[name] && r[0] != "skip" {
			extra = append(extra, name+": "+r[0]+" "+r[1])
		}
	}
	sort.Strings(extra)
	for _, e := range extra {
		t.Logf("not listed: %s", e)
	}
	if t.Failed() {
		t.Logf("suite output:\n%s", out)
	}
}
