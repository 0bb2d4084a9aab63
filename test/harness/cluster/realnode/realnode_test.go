package realnode_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
)

func TestMain(m *testing.M) {
	if err := sandbox.Enter(); err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func TestNodeReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: keepDir(t), RealNode: true})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Logf("ready in %s", time.Since(start))
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
}

func keepDir(t *testing.T) string {
	if d := os.Getenv("KEEP"); d != "" {
		_ = os.RemoveAll(d)
		return d
	}
	return t.TempDir()
}
