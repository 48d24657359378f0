package cuda

import (
	"os"
	"testing"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
)

// nvrtcOrSkip loads NVRTC for a test that compiles with it: without it the
// test skips, or fails where LUMSEARCH_REQUIRE_NVRTC=1 (CI) says it must
// be there.
func nvrtcOrSkip(t *testing.T) *nvrtc.Library {
	t.Helper()
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return lib
}
