// Package measure reads what the benchmarks report about a process from outside it:
// its CPU time and memory from /proc, and its Prometheus metrics.
package measure

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// CPU returns the user and system CPU time a process has used.
func CPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	rest := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	if len(rest) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(rest))
	}
	utime, err1 := strconv.ParseFloat(rest[11], 64)
	stime, err2 := strconv.ParseFloat(rest[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, rest[11], rest[12])
	}
	return time.Duration((utime + stime) / clockTicks() * float64(time.Second)), nil
}

// Machine is the machine's CPU time so far, from /proc/stat: busy (everything but idle
// and iowait) and the total, over every CPU.
type Machine struct{ Busy, Total time.Duration }

// ReadMachine reads Machine.
func ReadMachine() (Machine, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return Machine{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var m Machine
	for i, f := range fields[1:] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return Machine{}, fmt.Errorf("/proc/stat: %q: %w", f, err)
		}
		d := time.Duration(v / clockTicks() * float64(time.Second))
		m.Total += d
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += d
		}
	}
	return m, nil
}

// BusySince is the share of the machine's CPU time that was busy since earlier.
func (m Machine) BusySince(earlier Machine) float64 {
	if m.Total <= earlier.Total {
		return math.NaN()
	}
	return float64(m.Busy-earlier.Busy) / float64(m.Total-earlier.Total)
}

var (
	ticksOnce sync.Once
	ticks     = 100.0
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times.
func clockTicks() float64 {
	ticksOnce.Do(func() {
		out, err := exec.Command("getconf", "CLK_TCK").Output()
		if err != nil {
			return
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			ticks = v
		}
	})
	return ticks
}

// Memory returns a process's resident set size and its peak (VmRSS and VmHWM), in
// bytes.
func Memory(pid int) (rss, peak int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, perr := strconv.ParseInt(f[1], 10, 64)
		if perr != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
	}
	return rss, peak, nil
}

// MiB converts bytes to mebibytes.
func MiB(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape reads a Prometheus text endpoint with client (nil: http.DefaultClient).
func Scrape(client *http.Client, url string) (Families, error) {
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return Parse(resp.Body)
}

// Parse reads metrics in the Prometheus text format.
func Parse(r io.Reader) (Families, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	return Families(fams), err
}

// Sum adds the samples of a family whose labels include every one given: counter
// and gauge values, histogram sample counts. A missing family sums to 0.
func (f Families) Sum(name string, labels map[string]string) float64 {
	total := 0.0
	fam := f[name]
	if fam == nil {
		return 0
	}
	for _, m := range fam.GetMetric() {
		if !matches(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Histogram is a histogram's cumulative bucket counts (by upper bound) and its count.
type Histogram struct {
	Bounds, Counts []float64
	Count          float64
}

// Histogram returns the sum over a family's series of a histogram.
func (f Families) Histogram(name string) Histogram {
	byBound := map[float64]float64{}
	var h Histogram
	if fam := f[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			if m.Histogram == nil {
				continue
			}
			h.Count += float64(m.Histogram.GetSampleCount())
			for _, b := range m.Histogram.GetBucket() {
				byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
	}
	for b := range byBound {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, byBound[b])
	}
	return h
}

// Since returns what h counted after earlier (the same histogram, scraped before).
func (h Histogram) Since(earlier Histogram) Histogram {
	out := Histogram{Bounds: h.Bounds, Count: h.Count - earlier.Count, Counts: make([]float64, len(h.Counts))}
	before := map[float64]float64{}
	for i, b := range earlier.Bounds {
		before[b] = earlier.Counts[i]
	}
	for i, b := range h.Bounds {
		out.Counts[i] = h.Counts[i] - before[b]
	}
	return out
}

// AtMost returns how many observations were at most le (a bucket bound).
func (h Histogram) AtMost(le float64) float64 {
	for i, b := range h.Bounds {
		if b >= le {
			return h.Counts[i]
		}
	}
	return h.Count
}

// Quantile returns the upper bound of the bucket holding the q-quantile (an upper
// estimate); +Inf when it lies beyond the last finite bound, NaN without observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	for i, b := range h.Bounds {
		if h.Counts[i] >= q*h.Count {
			return b
		}
	}
	return math.Inf(1)
}
