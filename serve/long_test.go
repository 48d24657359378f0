package serve

import "testing"

// skipLong skips a long end-to-end case under -short: the README's test
// command runs with -short to stay within its time limits, and its long
// test command (without -short) runs these too.
func skipLong(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a long end-to-end case: the README's long test command runs it (go test without -short)")
	}
}
