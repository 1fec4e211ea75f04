package ib

import (
	"testing"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

// TestMain fails the package if goroutines outlive its tests.
func TestMain(m *testing.M) { leakcheck.Main(m) }
