// Package intern shares strings between cached objects: the many objects that hold the
// same string (a namespace, a label, a condition's reason, an endpoint) hold one copy.
package intern

import "sync"

// Strings hands out one copy of each string it is given. It forgets them all once it
// holds its maximum, which bounds it in a cluster whose strings change over months:
// those handed out stay valid. It is safe for concurrent use.
type Strings struct {
	mu   sync.Mutex
	max  int
	strs map[string]string
}

// New returns Strings that hold at most maxStrings strings.
func New(maxStrings int) *Strings {
	return &Strings{max: maxStrings, strs: map[string]string{}}
}

// Of returns the copy of s it holds, holding s when it has none.
func (in *Strings) Of(s string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.strs[s]; ok {
		return c
	}
	if len(in.strs) >= in.max {
		clear(in.strs)
	}
	in.strs[s] = s
	return s
}

// Len returns how many strings it holds.
func (in *Strings) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.strs)
}
