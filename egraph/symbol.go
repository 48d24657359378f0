package egraph

import "sync"

// Symbol is an interned operator name. Symbols compare and hash as integers;
// the zero Symbol is the empty name.
type Symbol uint32

// symbols is process-wide so that patterns compiled once can be matched
// against any e-graph, and so that a Symbol is meaningful without the e-graph
// that made it.
var symbols = struct {
	sync.RWMutex
	ids   map[string]Symbol
	names []string
}{ids: map[string]Symbol{"": 0}, names: []string{""}}

// Intern returns the symbol for name, creating it on first use.
func Intern(name string) Symbol {
	symbols.RLock()
	s, ok := symbols.ids[name]
	symbols.RUnlock()
	if ok {
		return s
	}
	symbols.Lock()
	defer symbols.Unlock()
	if s, ok := symbols.ids[name]; ok {
		return s
	}
	s = Symbol(len(symbols.names))
	symbols.names = append(symbols.names, name)
	symbols.ids[name] = s
	return s
}

// String returns the name the symbol was interned from.
func (s Symbol) String() string {
	symbols.RLock()
	defer symbols.RUnlock()
	if int(s) >= len(symbols.names) {
		return "<bad symbol>"
	}
	return symbols.names[s]
}

// symbolCount is the number of symbols interned so far; per-operator indexes
// size themselves by it.
func symbolCount() int {
	symbols.RLock()
	defer symbols.RUnlock()
	return len(symbols.names)
}
