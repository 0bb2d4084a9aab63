package process

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestChildrenListsAChildUntilItIsReaped(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(cmd.Process.Pid) + " sleep 30"
	if got := Children(); !slices.Contains(got, want) {
		t.Fatalf("Children() = %q, want it to hold %q", got, want)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for _, c := range Children() {
		if strings.HasPrefix(c, strconv.Itoa(cmd.Process.Pid)+" ") {
			t.Fatalf("Children() still lists %q after it was reaped", c)
		}
	}
}
