package tools

// SetBuildSet replaces what Path runs to wait for a background build, for the test's
// duration.
func SetBuildSet(f func(set string) error) (restore func()) {
	old := buildSet
	buildSet = f
	return func() { buildSet = old }
}
