package serve

import "strings"

// stopper releases a generation's text as it streams, holding back what
// could be the start of a stop string, so that no stop string (nor a
// part of one) ever reaches the client.
type stopper struct {
	stops   []string
	pending string
}

// add appends newly decoded text. It returns the text that is now safe to
// release and whether a stop string was hit (the text before it is
// released; the stop string and all after it are dropped). With check
// false no stop string is looked for: everything is released.
func (s *stopper) add(delta string, check bool) (release string, hit bool) {
	s.pending += delta
	if len(s.stops) == 0 || !check {
		release, s.pending = s.pending, ""
		return release, false
	}
	first := -1
	for _, stop := range s.stops {
		if i := strings.Index(s.pending, stop); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		release, s.pending = s.pending[:first], ""
		return release, true
	}
	keep := 0
	for _, stop := range s.stops {
		for n := min(len(stop)-1, len(s.pending)); n > keep; n-- {
			if strings.HasSuffix(s.pending, stop[:n]) {
				keep = n
				break
			}
		}
	}
	cut := len(s.pending) - keep
	release, s.pending = s.pending[:cut], s.pending[cut:]
	return release, false
}

// flush releases what is held back when the generation ends for another
// reason: it was no stop string.
func (s *stopper) flush() string {
	out := s.pending
	s.pending = ""
	return out
}
