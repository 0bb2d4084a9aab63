package types

import "sigs.k8s.io/controller-runtime/pkg/client"

// ProgressProbeType is the probe that gates progress from one phase to the next.
const ProgressProbeType = "Progress"

// Prober probes an object's state.
type Prober interface {
	Probe(obj client.Object) ProbeResult
}

// ProbeStatus is a probe's verdict.
type ProbeStatus string

// The verdicts.
const (
	ProbeStatusTrue    ProbeStatus = "True"
	ProbeStatusFalse   ProbeStatus = "False"
	ProbeStatusUnknown ProbeStatus = "Unknown"
)

// ProbeResult is a probe's verdict and why.
type ProbeResult struct {
	Status   ProbeStatus
	Messages []string
}

// ProbeResultContainer holds results by probe type.
type ProbeResultContainer map[string]ProbeResult

// NotInThisBuild is every probe's result here: Unknown, with ErrNotInThisBuild as its
// message.
func NotInThisBuild() ProbeResult {
	return ProbeResult{Status: ProbeStatusUnknown, Messages: []string{ErrNotInThisBuild.Error()}}
}
