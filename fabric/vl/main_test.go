package vl_test

import (
	"testing"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
