//go:build race

package rules

// raceEnabled says the tests run under the race detector, which slows
// saturation's Go code about eight times: the tests that saturate many
// corpus graphs sample them.
const raceEnabled = true
