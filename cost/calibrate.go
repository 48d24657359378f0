package cost

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// Sample is one measured kernel: its features and its measured time.
type Sample struct {
	Features Features
	Seconds  float64
}

// FitOptions tune Fit; the zero value is the default.
type FitOptions struct {
	// Loss is the robust loss of the reweighting: "huber" (the default)
	// or "tukey" (Tukey's biweight, which ignores gross outliers entirely;
	// it starts from the Huber fit).
	Loss string
	// Tuning is the loss's constant in robust standard deviations of the
	// residuals: 1.345 for Huber and 4.685 for Tukey unless set.
	Tuning float64
	// MaxIter bounds the iterations of each phase (default 100).
	MaxIter int
	// MinEvidence is the evidence a term needs to be fitted: the sum over
	// the samples of the term's share of their predicted time (default
	// 3, as if three samples were wholly bound by it). A term with less
	// keeps its default.
	MinEvidence float64
}

// Bounds on the fitted values: efficiencies in [minFraction, 1], the
// launch overhead non-negative.
const (
	minFraction = 1e-4
	minSamples  = 4
)

// Fit fits d's efficiency factors to measured samples: the memory
// fraction, the fraction of every compute peak the samples' work uses, and
// the launch overhead, so that Predict matches the measured times in
// relative terms.
//
// Predict is max(mem, comp)/fill + launches*launch with mem and comp
// inversely proportional to the efficiencies, so the fit alternates two
// steps from Defaults(d): assign each sample to the term that dominates
// it under the current factors, then solve a linear least-squares problem
// in the inverse efficiencies and the launch overhead on the relative
// residuals (predicted/measured - 1), weighted by the robust loss
// (iteratively reweighted least squares, the scale from the residuals'
// median absolute deviation). A term the samples say too little about
// (FitOptions.MinEvidence) keeps its default; efficiencies are clamped to
// (0, 1] and the launch overhead to non-negative values. Terms of the
// device the samples do not use keep their defaults in the result.
func Fit(d *Device, samples []Sample, opt FitOptions) (Factors, error) {
	p, err := newProblem(d, samples)
	if err != nil {
		return Factors{}, err
	}
	opt = opt.withDefaults()
	if opt.Loss != "huber" && opt.Loss != "tukey" {
		return Factors{}, fmt.Errorf("fit on %s: unknown loss %q (want huber or tukey)", d.Name, opt.Loss)
	}
	huber := opt
	if opt.Loss == "tukey" {
		huber.Loss, huber.Tuning = "huber", 1.345
	}
	theta, err := p.irls(huber, p.start())
	if err != nil {
		return Factors{}, err
	}
	if opt.Loss == "tukey" {
		if theta, err = p.irls(opt, theta); err != nil {
			return Factors{}, err
		}
	}
	return p.factors(theta), nil
}

func (o FitOptions) withDefaults() FitOptions {
	if o.Loss == "" {
		o.Loss = "huber"
	}
	if o.Tuning <= 0 {
		o.Tuning = 1.345
		if o.Loss == "tukey" {
			o.Tuning = 4.685
		}
	}
	if o.MaxIter <= 0 {
		o.MaxIter = 100
	}
	if o.MinEvidence <= 0 {
		o.MinEvidence = 3
	}
	return o
}

// problem is a fit's data: per sample the coefficients that make its
// predicted time linear in the parameters once its dominating term is
// known. The parameters are theta[0] = 1/Memory, theta[1+k] =
// 1/Compute[keys[k]], theta[last] = Launch/default launch.
type problem struct {
	d    *Device
	def  Factors
	keys []string
	t    []float64   // measured seconds
	mem  []float64   // memory seconds at efficiency 1, fill included
	comp [][]float64 // compute seconds per key at efficiency 1, fill included
	lau  []float64   // launch seconds at the default overhead
}

func newProblem(d *Device, samples []Sample) (*problem, error) {
	if d == nil {
		return nil, errors.New("fit: no device")
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("fit: %w", err)
	}
	if len(samples) < minSamples {
		return nil, fmt.Errorf("fit on %s: %d samples, need at least %d", d.Name, len(samples), minSamples)
	}
	p := &problem{d: d, def: Defaults(d)}
	keySet := map[string]bool{}
	for i, s := range samples {
		if err := checkSample(d, s); err != nil {
			return nil, fmt.Errorf("fit on %s: sample %d: %w", d.Name, i, err)
		}
		for _, w := range s.Features.Work {
			if w.FLOPs > 0 {
				keySet[computeKey(w.Class, w.DType)] = true
			}
		}
	}
	for k := range keySet {
		p.keys = append(p.keys, k)
	}
	sort.Strings(p.keys)
	index := map[string]int{}
	for i, k := range p.keys {
		index[k] = i
	}
	// The coefficients come from Predict itself, so the fit and the model
	// cannot disagree on fill, waves or launch counting.
	unit := Factors{Memory: 1, Compute: map[string]float64{}}
	for _, k := range p.keys {
		unit.Compute[k] = 1
	}
	for _, s := range samples {
		x := s.Features
		memOnly := x
		memOnly.Work = nil
		m, err := Predict(d, unit, memOnly)
		if err != nil {
			return nil, err
		}
		row := make([]float64, len(p.keys))
		for _, w := range x.Work {
			if w.FLOPs <= 0 {
				continue
			}
			one := x
			one.Bytes, one.TileBytes, one.SharedBytes, one.Instructions, one.Work = 0, 0, 0, 0, []Work{w}
			c, err := Predict(d, unit, one)
			if err != nil {
				return nil, fmt.Errorf("fit: %w", err)
			}
			row[index[computeKey(w.Class, w.DType)]] += c
		}
		launches := x
		launches.Bytes, launches.TileBytes, launches.SharedBytes, launches.Instructions, launches.Work = 0, 0, 0, 0, nil
		n, err := Predict(d, Factors{Memory: 1, Launch: 1}, launches)
		if err != nil {
			return nil, err
		}
		p.t = append(p.t, s.Seconds)
		p.mem = append(p.mem, m)
		p.comp = append(p.comp, row)
		p.lau = append(p.lau, n*p.def.Launch)
	}
	return p, nil
}

func checkSample(d *Device, s Sample) error {
	x := s.Features
	switch {
	case !(s.Seconds > 0) || math.IsInf(s.Seconds, 0):
		return fmt.Errorf("seconds %v must be positive and finite", s.Seconds)
	case !(x.Bytes >= 0) || math.IsInf(x.Bytes, 0):
		return fmt.Errorf("bytes %v must be non-negative and finite", x.Bytes)
	case x.Blocks < 0 || x.PerSM < 0 || x.Launches < 0:
		return errors.New("blocks, per-SM blocks and launches must not be negative")
	}
	for _, w := range x.Work {
		if !(w.FLOPs >= 0) || math.IsInf(w.FLOPs, 0) {
			return fmt.Errorf("%s %s work %v must be non-negative and finite", w.Class, w.DType, w.FLOPs)
		}
		if _, ok := d.Peak(w.Class, w.DType); !ok && w.FLOPs > 0 {
			return fmt.Errorf("no peak for %s %s on %s", w.Class, w.DType, d.Name)
		}
	}
	return nil
}

func (p *problem) nparams() int { return len(p.keys) + 2 }

func (p *problem) start() []float64 {
	theta := make([]float64, p.nparams())
	theta[0] = 1 / p.def.Memory
	for k, key := range p.keys {
		theta[1+k] = 1 / p.def.Compute[key]
	}
	theta[len(theta)-1] = 1
	return theta
}

func (p *problem) name(j int) string {
	switch {
	case j == 0:
		return "memory"
	case j == p.nparams()-1:
		return "launch"
	}
	return p.keys[j-1]
}

// bounds are each parameter's limits: inverse efficiencies in [1,
// 1/minFraction], the launch scale non-negative.
func (p *problem) bounds(j int) (lo, hi float64) {
	if j == p.nparams()-1 {
		return 0, math.Inf(1)
	}
	return 1, 1 / minFraction
}

// rows returns each sample's coefficients under the regime theta implies
// (memory- or compute-bound), and the regimes.
func (p *problem) rows(theta []float64) ([][]float64, []bool) {
	n, np := len(p.t), p.nparams()
	rows := make([][]float64, n)
	memBound := make([]bool, n)
	for i := range n {
		comp := 0.0
		for k := range p.keys {
			comp += p.comp[i][k] * theta[1+k]
		}
		row := make([]float64, np)
		if p.mem[i]*theta[0] >= comp {
			memBound[i] = true
			row[0] = p.mem[i]
		} else {
			copy(row[1:], p.comp[i])
		}
		row[np-1] = p.lau[i]
		rows[i] = row
	}
	return rows, memBound
}

// irls runs the alternation from theta under one loss until the
// parameters and the regimes settle.
func (p *problem) irls(opt FitOptions, theta []float64) ([]float64, error) {
	theta = slices.Clone(theta)
	n, np := len(p.t), p.nparams()
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	first := opt.Loss == "huber" // the Huber phase starts unweighted
	var prevRegime []bool
	for iter := 0; iter < opt.MaxIter; iter++ {
		rows, regime := p.rows(theta)
		r := make([]float64, n)
		for i := range n {
			r[i] = dot(rows[i], theta)/p.t[i] - 1
		}
		if !first || iter > 0 {
			robustWeights(r, opt, w)
		}
		// Which terms the samples say enough about.
		free := make([]bool, np)
		anyFree := false
		for j := range np {
			ev := 0.0
			for i := range n {
				if pred := dot(rows[i], theta); pred > 0 {
					ev += w[i] * rows[i][j] * theta[j] / pred
				}
			}
			free[j] = ev >= opt.MinEvidence
			anyFree = anyFree || free[j]
		}
		if !anyFree {
			return nil, fmt.Errorf("fit on %s: no term is identifiable from %d samples (each term needs evidence of at least %g samples bound by it)",
				p.d.Name, n, opt.MinEvidence)
		}
		next, err := p.solve(rows, w, theta, free)
		if err != nil {
			return nil, err
		}
		change := 0.0
		for j := range np {
			change = max(change, math.Abs(next[j]-theta[j])/max(math.Abs(theta[j]), 1e-12))
		}
		theta = next
		if change < 1e-9 && slices.Equal(regime, prevRegime) {
			break
		}
		prevRegime = regime
	}
	return theta, nil
}

// solve is one weighted least-squares step on the free parameters, the
// others held at their values in theta; a free parameter that leaves its
// bounds is held at the bound and the rest solved again.
func (p *problem) solve(rows [][]float64, w, theta []float64, free []bool) ([]float64, error) {
	n, np := len(p.t), p.nparams()
	out := slices.Clone(theta)
	free = slices.Clone(free)
	for {
		var cols []int
		for j := range np {
			if free[j] {
				cols = append(cols, j)
			}
		}
		if len(cols) == 0 {
			return out, nil
		}
		var a [][]float64
		var b []float64
		for i := range n {
			if w[i] <= 0 {
				continue
			}
			sw := math.Sqrt(w[i])
			fixed := 0.0
			for j := range np {
				if !free[j] {
					fixed += rows[i][j] * out[j]
				}
			}
			row := make([]float64, len(cols))
			for c, j := range cols {
				row[c] = sw * rows[i][j] / p.t[i]
			}
			a = append(a, row)
			b = append(b, sw*(1-fixed/p.t[i]))
		}
		if len(a) <= len(cols) {
			return nil, fmt.Errorf("fit on %s: too few samples (%d with weight) for %d terms", p.d.Name, len(a), len(cols))
		}
		x, bad := lstsq(a, b)
		if bad >= 0 {
			return nil, fmt.Errorf("fit on %s: term %s cannot be told apart from the others with these samples", p.d.Name, p.name(cols[bad]))
		}
		clamped := false
		for c, j := range cols {
			lo, hi := p.bounds(j)
			switch {
			case x[c] < lo:
				out[j], free[j], clamped = lo, false, true
			case x[c] > hi:
				out[j], free[j], clamped = hi, false, true
			default:
				out[j] = x[c]
			}
		}
		if !clamped {
			return out, nil
		}
	}
}

// robustWeights sets w from the residuals r under the loss, the scale
// being the residuals' normalised median absolute deviation.
func robustWeights(r []float64, opt FitOptions, w []float64) {
	med := median(r)
	dev := make([]float64, len(r))
	for i, x := range r {
		dev[i] = math.Abs(x - med)
	}
	scale := max(1.4826*median(dev), 1e-9)
	c := opt.Tuning * scale
	for i, x := range r {
		a := math.Abs(x)
		switch opt.Loss {
		case "tukey":
			if a >= c {
				w[i] = 0
			} else {
				u := 1 - (a/c)*(a/c)
				w[i] = u * u
			}
		default:
			if a <= c {
				w[i] = 1
			} else {
				w[i] = c / a
			}
		}
	}
}

func (p *problem) factors(theta []float64) Factors {
	f := Factors{Memory: 1 / theta[0], Compute: map[string]float64{}, Launch: theta[len(theta)-1] * p.def.Launch}
	for k, v := range p.def.Compute {
		f.Compute[k] = v
	}
	for k, key := range p.keys {
		f.Compute[key] = 1 / theta[1+k]
	}
	return f
}

// lstsq solves min |a x - b| by Householder QR, the columns scaled to unit
// norm; it returns the index of a column that is (nearly) a combination of
// the others instead, or -1.
func lstsq(a [][]float64, b []float64) ([]float64, int) {
	n, p := len(a), len(a[0])
	m := make([][]float64, n)
	for i := range a {
		m[i] = slices.Clone(a[i])
	}
	y := slices.Clone(b)
	scale := make([]float64, p)
	for j := range p {
		s := 0.0
		for i := range n {
			s += m[i][j] * m[i][j]
		}
		s = math.Sqrt(s)
		if s == 0 {
			return nil, j
		}
		scale[j] = s
		for i := range n {
			m[i][j] /= s
		}
	}
	for j := range p {
		norm := 0.0
		for i := j; i < n; i++ {
			norm += m[i][j] * m[i][j]
		}
		norm = math.Sqrt(norm)
		if norm < 1e-9 {
			return nil, j
		}
		alpha := -math.Copysign(norm, m[j][j])
		v := make([]float64, n-j)
		for i := j; i < n; i++ {
			v[i-j] = m[i][j]
		}
		v[0] -= alpha
		vv := dot(v, v)
		if vv == 0 {
			continue
		}
		for c := j; c < p; c++ {
			s := 0.0
			for i := j; i < n; i++ {
				s += v[i-j] * m[i][c]
			}
			s *= 2 / vv
			for i := j; i < n; i++ {
				m[i][c] -= s * v[i-j]
			}
		}
		s := 0.0
		for i := j; i < n; i++ {
			s += v[i-j] * y[i]
		}
		s *= 2 / vv
		for i := j; i < n; i++ {
			y[i] -= s * v[i-j]
		}
	}
	x := make([]float64, p)
	for j := p - 1; j >= 0; j-- {
		s := y[j]
		for c := j + 1; c < p; c++ {
			s -= m[j][c] * x[c]
		}
		x[j] = s / m[j][j]
	}
	for j := range p {
		x[j] /= scale[j]
	}
	return x, -1
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Report is how well factors predict a set of samples.
type Report struct {
	// MedianAbsRelError and MaxAbsRelError are the median and the largest
	// |predicted - measured| / measured.
	MedianAbsRelError float64
	MaxAbsRelError    float64
	// Spearman is the rank correlation of predicted and measured times
	// (NaN when undefined: fewer than two samples, or all equal).
	Spearman float64
	// N is the number of samples.
	N int
}

// reportJSON is Report on disk; NaN is written as null.
type reportJSON struct {
	MedianAbsRelError *float64 `json:"median_abs_rel_error"`
	MaxAbsRelError    *float64 `json:"max_abs_rel_error"`
	Spearman          *float64 `json:"spearman"`
	N                 int      `json:"n"`
}

// MarshalJSON writes the report with NaN as null.
func (r Report) MarshalJSON() ([]byte, error) {
	num := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	return json.Marshal(reportJSON{num(r.MedianAbsRelError), num(r.MaxAbsRelError), num(r.Spearman), r.N})
}

// UnmarshalJSON reads what MarshalJSON writes, null as NaN.
func (r *Report) UnmarshalJSON(data []byte) error {
	var j reportJSON
	if err := decodeStrict(data, &j); err != nil {
		return err
	}
	val := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	*r = Report{val(j.MedianAbsRelError), val(j.MaxAbsRelError), val(j.Spearman), j.N}
	return nil
}

// Evaluate reports how well factors f predict the samples on d.
func Evaluate(d *Device, f Factors, samples []Sample) (Report, error) {
	if d == nil {
		return Report{}, errors.New("evaluate: no device")
	}
	if len(samples) == 0 {
		return Report{}, fmt.Errorf("evaluate on %s: no samples", d.Name)
	}
	pred := make([]float64, len(samples))
	meas := make([]float64, len(samples))
	rel := make([]float64, len(samples))
	for i, s := range samples {
		if err := checkSample(d, s); err != nil {
			return Report{}, fmt.Errorf("evaluate on %s: sample %d: %w", d.Name, i, err)
		}
		p, err := Predict(d, f, s.Features)
		if err != nil {
			return Report{}, fmt.Errorf("evaluate: sample %d: %w", i, err)
		}
		pred[i], meas[i] = p, s.Seconds
		rel[i] = math.Abs(p-s.Seconds) / s.Seconds
	}
	return Report{
		MedianAbsRelError: median(rel),
		MaxAbsRelError:    slices.Max(rel),
		Spearman:          Spearman(pred, meas),
		N:                 len(samples),
	}, nil
}

// Spearman is the Spearman rank correlation of a and b: the Pearson
// correlation of their ranks, tied values sharing their average rank. It
// is NaN when a and b differ in length, hold fewer than two values, or
// either is constant.
func Spearman(a, b []float64) float64 {
	if len(a) != len(b) || len(a) < 2 {
		return math.NaN()
	}
	ra, rb := ranks(a), ranks(b)
	ma, mb := mean(ra), mean(rb)
	var sab, saa, sbb float64
	for i := range ra {
		x, y := ra[i]-ma, rb[i]-mb
		sab += x * y
		saa += x * x
		sbb += y * y
	}
	if saa == 0 || sbb == 0 {
		return math.NaN()
	}
	return sab / math.Sqrt(saa*sbb)
}

// ranks returns 1-based ranks, ties averaged.
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return xs[idx[i]] < xs[idx[j]] })
	r := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && xs[idx[j]] == xs[idx[i]] {
			j++
		}
		avg := float64(i+j+1) / 2 // ranks i+1 .. j
		for k := i; k < j; k++ {
			r[idx[k]] = avg
		}
		i = j
	}
	return r
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// CrossCheck fits on the samples less a held-out part and reports on the
// held-out part. The split is a deterministic function of seed and the
// number of samples: heldOutFraction of them (at least one, and at least
// minSamples left to fit), drawn by a seeded permutation.
func CrossCheck(d *Device, samples []Sample, heldOutFraction float64, seed uint64, opt FitOptions) (Factors, Report, error) {
	if !(heldOutFraction > 0 && heldOutFraction < 1) {
		return Factors{}, Report{}, fmt.Errorf("cross-check: held-out fraction %v must lie in (0, 1)", heldOutFraction)
	}
	n := len(samples)
	k := int(math.Round(heldOutFraction * float64(n)))
	k = max(k, 1)
	if n-k < minSamples {
		return Factors{}, Report{}, fmt.Errorf("cross-check: %d samples, too few to hold out %d and fit on at least %d", n, k, minSamples)
	}
	perm := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)).Perm(n)
	held := make([]Sample, 0, k)
	rest := make([]Sample, 0, n-k)
	isHeld := make([]bool, n)
	for _, i := range perm[:k] {
		isHeld[i] = true
	}
	for i, s := range samples { // keep the samples' order within each part
		if isHeld[i] {
			held = append(held, s)
		} else {
			rest = append(rest, s)
		}
	}
	f, err := Fit(d, rest, opt)
	if err != nil {
		return Factors{}, Report{}, err
	}
	r, err := Evaluate(d, f, held)
	if err != nil {
		return Factors{}, Report{}, err
	}
	return f, r, nil
}

// Profile is a device's fitted factors as saved: what was fitted, when,
// from how many samples, and how well the fit predicts held-out samples.
type Profile struct {
	Device  string    `json:"device"`
	Factors Factors   `json:"factors"`
	Fitted  time.Time `json:"fitted"`
	Samples int       `json:"samples"`
	HeldOut Report    `json:"held_out"`
}

func (p Profile) validate() error {
	if p.Device == "" {
		return errors.New("no device")
	}
	if p.Samples < 0 {
		return errors.New("negative sample count")
	}
	return checkFactors(p.Factors)
}

func checkFactors(f Factors) error {
	if !(f.Memory > 0 && f.Memory <= 1) {
		return fmt.Errorf("memory factor %v must lie in (0, 1]", f.Memory)
	}
	for k, v := range f.Compute {
		if !(v > 0 && v <= 1) {
			return fmt.Errorf("compute factor %s = %v must lie in (0, 1]", k, v)
		}
	}
	if !(f.Launch >= 0) || math.IsInf(f.Launch, 0) {
		return fmt.Errorf("launch %v must be non-negative and finite", f.Launch)
	}
	return nil
}

// SaveProfile writes p to path as JSON, replacing the file atomically.
func SaveProfile(path string, p Profile) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("save profile %s: %w", path, err)
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("save profile %s: %w", path, err)
	}
	data = append(data, '\n')
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("save profile %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("save profile %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save profile %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save profile %s: %w", path, err)
	}
	return nil
}

// LoadProfile reads a profile SaveProfile wrote; decoding is strict.
func LoadProfile(path string) (Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("load profile: %w", err)
	}
	var p Profile
	if err := decodeStrict(data, &p); err != nil {
		return Profile{}, fmt.Errorf("load profile %s: %w", path, err)
	}
	if err := p.validate(); err != nil {
		return Profile{}, fmt.Errorf("load profile %s: %w", path, err)
	}
	return p, nil
}
