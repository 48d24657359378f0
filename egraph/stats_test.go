package egraph
import ("testing";"fmt";"time")
func TestACPhases(t *testing.T) {
	var s, a, r, tot time.Duration
	n := 50
	var rep *Report
	for range n {
		_, rep = saturateAC(t, 7, SimpleScheduler{})
		for _, it := range rep.Iterations { s += it.Search; a += it.Apply; r += it.Rebuild }
		tot += rep.Time
	}
	d := time.Duration(n)
	fmt.Println("search", s/d, "apply", a/d, "rebuild", r/d, "total", tot/d)
	for _, it := range rep.Iterations { fmt.Print(it.Index, ":"); for _, r := range it.Rules { fmt.Print(" ", r.Matches, "/", r.Applied) }; fmt.Println() }
}
