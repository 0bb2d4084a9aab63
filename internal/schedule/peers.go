package schedule

import (
	"fmt"
	"strconv"
	"strings"
)

// Peer names.
const (
	KubeDownscaler   = "kube-downscaler"
	GoKubeDownscaler = "GoKubeDownscaler"
)

// PeerReading is how one of the peers reads a schedule that it reads differently from
// phalanks: Spec is that reading in phalanks' grammar (so its transitions can be
// computed with Parse), Notes say, element by element, what differs. Rejected is set
// when the peer refuses the schedule altogether; Spec is then empty.
type PeerReading struct {
	Peer     string
	Spec     string
	Notes    []string
	Rejected bool
}

// PeerReadings returns the readings of kube-downscaler and GoKubeDownscaler that differ
// from phalanks' for a schedule phalanks accepts (the documented differences: reversed
// windows, single weekdays, from/until, Z and spaces in absolute ranges, elements that
// rely on the operator's defaults, holiday calendars). Elements the strict grammar
// rejects and reads as the peers do (see Schedule.Warnings) agree by construction.
func PeerReadings(spec string, d Defaults) ([]PeerReading, error) {
	if _, err := Parse(spec, d); err != nil {
		return nil, err
	}
	var out []PeerReading
	for _, peer := range []string{KubeDownscaler, GoKubeDownscaler} {
		r := PeerReading{Peer: peer}
		var elements []string
		for i, part := range strings.Split(spec, ",") {
			text := strings.TrimSpace(part)
			kept, note, rejected := peerElement(peer, text)
			if note != "" {
				r.Notes = append(r.Notes, "element "+strconv.Itoa(i+1)+" "+strconv.Quote(text)+": "+note)
			}
			if rejected {
				r.Rejected = true
			}
			elements = append(elements, kept...)
		}
		if len(r.Notes) == 0 {
			continue
		}
		if !r.Rejected {
			r.Spec = strings.Join(elements, ", ")
			if r.Spec == "" {
				r.Spec = "never"
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// peerElement reads one element (valid for phalanks) as peer does: the elements of
// phalanks' grammar with that meaning, a note when it differs, and whether the peer
// rejects it.
func peerElement(peer, text string) (elements []string, note string, rejected bool) {
	lower := strings.ToLower(text)
	switch {
	case lower == "always" || lower == "true" || lower == "never" || lower == "false":
		return []string{text}, "", false
	case strings.HasPrefix(lower, HolidaysPrefix):
		return nil, peer + " has no holiday calendars and rejects it", true
	case looksLikeDays(text):
		return nil, peer + " has no whole days (dates without a time, yearly and Easter days) and rejects it", true
	case strings.HasPrefix(lower, "from") || strings.HasPrefix(lower, "until"):
		if peer == KubeDownscaler {
			return nil, "kube-downscaler has no from/until and rejects it", true
		}
		return []string{text}, "", false
	case looksAbsolute(text):
		if peer == KubeDownscaler && (strings.Contains(text, "Z") || strings.Contains(text, " ")) {
			return nil, "kube-downscaler rejects Z and spaces in an absolute range (write +00:00, no spaces)", true
		}
		// kube-downscaler's inclusive end differs by one instant only.
		return []string{text}, "", false
	}
	fields := strings.Fields(text)
	if len(fields) != 3 {
		return nil, peer + " needs weekdays, a time window and a zone in every element; this one relies on the operator's defaults", true
	}
	if !strings.Contains(fields[0], "-") {
		return nil, peer + " rejects a single weekday; write " + fields[0] + "-" + fields[0], true
	}
	start, end, _ := strings.Cut(fields[1], "-")
	a, errA := clock(start)
	b, errB := clock(end)
	if errA != nil || errB != nil || !a.valid(false) || !b.valid(true) || a.minutes() <= b.minutes() {
		// Not a reversed window, or one read leniently, as the peers read it.
		return []string{text}, "", false
	}
	if peer == KubeDownscaler {
		return nil, "kube-downscaler never matches a window that ends before it starts", false
	}
	sameDay := []string{
		fmt.Sprintf("%s %s-24:00 %s", fields[0], start, fields[2]),
		fmt.Sprintf("%s 00:00-%s %s", fields[0], end, fields[2]),
	}
	return sameDay, "GoKubeDownscaler counts the part after midnight to the day it falls on: " + strings.Join(sameDay, ", "), false
}
