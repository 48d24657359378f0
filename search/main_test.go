package search

import (
	"os"
	"testing"

	"github.com/lumsearch/lumsearch/internal/fakecuda"
)

// TestMain removes the fake driver's folder after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	fakecuda.Cleanup()
	os.Exit(code)
}
