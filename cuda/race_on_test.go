//go:build race

package cuda

// raceEnabled says the tests run under the race detector, which slows the
// compiler's Go code (saturation, lowering) several times: the tests that
// run the whole pipeline on many graphs sample them.
const raceEnabled = true
