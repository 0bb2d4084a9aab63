// Command cluster starts the local control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok) and keeps it running until interrupted.
//
//	go run ./hack/cluster [-dir DIR] [-nodes N]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/phalanks/phalanks-operator/test/harness/cluster"
)

func main() {
	dir := flag.String("dir", "", "directory for data, kubeconfigs and logs (default: a new temporary directory)")
	nodes := flag.Int("nodes", 1, "number of fake kwok nodes")
	flag.Parse()
	if err := run(*dir, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(dir string, nodes int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "phalanks-cluster-"); err != nil {
			return err
		}
	}
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Nodes: nodes})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Printf("local cluster ready in %s\n  export KUBECONFIG=%s\n  logs: %s\nCtrl-C stops it.\n",
		time.Since(start).Round(time.Second), c.Kubeconfig, c.LogDir)
	<-ctx.Done()
	return nil
}
