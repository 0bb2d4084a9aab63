package intern_test

import (
	"testing"
	"unsafe"

	"github.com/phalanks/phalanks-operator/internal/intern"
)

func TestItSharesAndForgetsWhenFull(t *testing.T) {
	in := intern.New(2)
	// Strings of more than one byte: the runtime shares one-byte strings anyway.
	fresh := func(s string) string { return string([]byte(s)) }
	x := in.Of(fresh("web-7c9f4"))
	if got := in.Of(fresh("web-7c9f4")); !sameBytes(got, x) {
		t.Error("the second copy is not the first")
	}
	in.Of(fresh("db-0"))
	in.Of(fresh("cache-0")) // full: forgets the two before
	if in.Len() != 1 {
		t.Errorf("it holds %d strings; want 1 after forgetting", in.Len())
	}
	if got := in.Of(fresh("web-7c9f4")); got != "web-7c9f4" || sameBytes(got, x) {
		t.Error("web-7c9f4 was not forgotten")
	}
}

// sameBytes reports whether two strings share their bytes, not only their value.
func sameBytes(a, b string) bool {
	return unsafe.StringData(a) == unsafe.StringData(b) //nolint:gosec // G103: where the bytes are is what the tests check
}
