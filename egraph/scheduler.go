package egraph

// Scheduler decides, each iteration, which rules run and how many matches
// they may have. Its decisions depend only on match counts, never on time,
// so that runs are reproducible.
type Scheduler interface {
	// Start is called once per run with the number of rules.
	Start(rules int)
	// Limit says whether rule runs in this iteration and the most matches
	// it may have before it counts as exploding (0: no limit). The runner
	// searches for at most limit+1 matches.
	Limit(iter, rule int) (run bool, limit int)
	// Searched is told how many matches the rule found (at most limit+1)
	// and says whether to apply them.
	Searched(iter, rule, matches int) bool
	// Banned says whether the rule is banned at this iteration.
	Banned(iter, rule int) bool
	// CanStop is asked when an iteration changed nothing. A scheduler that
	// has banned rules brings the bans forward and answers false, because
	// saturation with rules held back is not saturation.
	CanStop(iter int) bool
}

// SimpleScheduler runs every rule on every match, every iteration.
type SimpleScheduler struct{}

// Start implements Scheduler.
func (SimpleScheduler) Start(int) {}

// Limit implements Scheduler.
func (SimpleScheduler) Limit(int, int) (bool, int) { return true, 0 }

// Searched implements Scheduler.
func (SimpleScheduler) Searched(int, int, int) bool { return true }

// Banned implements Scheduler.
func (SimpleScheduler) Banned(int, int) bool { return false }

// CanStop implements Scheduler.
func (SimpleScheduler) CanStop(int) bool { return true }

// BackoffScheduler is egg's default: a rule whose matches exceed its
// threshold is banned for some iterations, and each ban doubles both the
// rule's threshold and its next ban. It keeps rules such as associativity
// from crowding out the rest.
type BackoffScheduler struct {
	MatchLimit int // initial threshold (egg: 1000)
	BanLength  int // initial ban in iterations (egg: 5)
	stats      []backoffStats
}

type backoffStats struct {
	timesBanned int
	bannedUntil int
}

// NewBackoffScheduler returns a backoff scheduler with egg's defaults.
func NewBackoffScheduler() *BackoffScheduler {
	return &BackoffScheduler{MatchLimit: 1000, BanLength: 5}
}

// Start implements Scheduler.
func (s *BackoffScheduler) Start(rules int) { s.stats = make([]backoffStats, rules) }

// Limit implements Scheduler.
func (s *BackoffScheduler) Limit(iter, rule int) (bool, int) {
	st := &s.stats[rule]
	if iter < st.bannedUntil {
		return false, 0
	}
	return true, s.MatchLimit << st.timesBanned
}

// Searched implements Scheduler.
func (s *BackoffScheduler) Searched(iter, rule, matches int) bool {
	st := &s.stats[rule]
	threshold := s.MatchLimit << st.timesBanned
	if matches <= threshold {
		return true
	}
	st.bannedUntil = iter + s.BanLength<<st.timesBanned
	st.timesBanned++
	return false
}

// Banned implements Scheduler.
func (s *BackoffScheduler) Banned(iter, rule int) bool { return iter < s.stats[rule].bannedUntil }

// CanStop implements Scheduler. As in egg, it moves every ban earlier by the
// same amount, so that the ban that would end first ends now.
func (s *BackoffScheduler) CanStop(iter int) bool {
	first := -1
	for _, st := range s.stats {
		if st.bannedUntil > iter && (first < 0 || st.bannedUntil < first) {
			first = st.bannedUntil
		}
	}
	if first < 0 {
		return true
	}
	delta := first - iter
	for i := range s.stats {
		if s.stats[i].bannedUntil > iter {
			s.stats[i].bannedUntil -= delta
		}
	}
	return false
}
