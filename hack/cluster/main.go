// Command cluster starts the local control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) with kwok's fake nodes, or, with -real-node
// (as root), a real node in a sandbox of private namespaces, and keeps it running until
// interrupted.
//
//	go run ./hack/cluster [-dir DIR] [-nodes N] [-real-node]
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
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
)

func main() {
	dir := flag.String("dir", "", "directory for data, kubeconfigs and logs (default: a new temporary directory)")
	nodes := flag.Int("nodes", 1, "number of fake kwok nodes")
	realNode := flag.Bool("real-node", false, "run a real node (containerd, kubelet, kube-proxy) instead of fake ones; needs root")
	flag.Parse()
	if *realNode {
		if err := sandbox.Enter(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster:", err)
			os.Exit(2)
		}
	}
	if err := run(*dir, *nodes, *realNode); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(dir string, nodes int, realNode bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "phalanks-cluster-"); err != nil {
			return err
		}
	}
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Nodes: nodes, RealNode: realNode})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Printf("local cluster ready in %s\n  export KUBECONFIG=%s\n  logs: %s\n",
		time.Since(start).Round(time.Second), c.Kubeconfig, c.LogDir)
	if realNode {
		enter, err := sandbox.EnterCommand()
		if err != nil {
			return err
		}
		fmt.Printf("  it runs in its own namespaces; from another terminal, as root: %s kubectl ...\n", enter)
	}
	fmt.Println("Ctrl-C stops it.")
	<-ctx.Done()
	return nil
}
