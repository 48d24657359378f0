//go:build race

package search

// raceEnabled says the tests run under the race detector, which slows the
// driver's Go code several times: the slowest tests sample their cases.
const raceEnabled = true
