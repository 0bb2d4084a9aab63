package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/sharding"
)

// storageBucketRing names the ring of replicas that share the StorageBuckets.
const storageBucketRing = "phalanks-storagebuckets"

// setupShard makes this replica a member of the StorageBucket ring when leader election
// and the StorageBucket controller are on (every replica of a Deployment then probes its share), and decides whether the
// StorageBucket informer asks the API server for that share only. It returns the
// informer constructor for the manager's cache (nil: the default).
func setupShard(cfg *config, restCfg *rest.Config, log logr.Logger) (func(toolscache.ListerWatcher, runtime.Object,
	time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer, error) {
	o := &cfg.storageBucket
	if !cfg.leaderElect || !cfg.enabled[controllerStorageBucket] {
		return nil, nil
	}
	ns := cfg.leaderElectNamespace // leaseNamespace filled it in
	if ns == "" {
		return nil, errors.New("namespace of the StorageBucket ring's Leases: none decided")
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	identity, err := memberIdentity()
	if err != nil {
		return nil, err
	}
	o.Shard = &sharding.Member{
		Leases: cs.CoordinationV1(), Namespace: ns, Ring: storageBucketRing, Identity: identity,
		LeaseDuration: o.ShardLeaseDuration, RenewPeriod: o.ShardRenewPeriod,
		Clock: o.Clock, Log: log.WithName("shard"),
	}
	switch o.ServerSideSharding {
	case "auto", "true", "false":
	default:
		return nil, fmt.Errorf("--storagebucket-server-side-sharding: %q is not auto, true or false", o.ServerSideSharding)
	}
	serverSide, err := serverSideSharding(o.ServerSideSharding, restCfg)
	if err != nil {
		// Listing may need this very process (conversion of objects stored in an older
		// version through its webhook, not yet serving): filtering in the replica works
		// with any API server.
		log.Info("could not tell whether the API server shards lists; each replica filters its share itself",
			"reason", err.Error())
		serverSide = false
	}
	log.Info("StorageBuckets are shared by the replicas of a shard ring", "ring", storageBucketRing,
		"member", identity, "namespace", ns, "serverSideSharding", serverSide)
	if !serverSide {
		return nil, nil
	}
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration,
		idx toolscache.Indexers) toolscache.SharedIndexInformer {
		if _, ok := obj.(*phalanksv1beta1.StorageBucket); ok {
			lw = &sharding.Narrowed{Member: o.Shard, Inner: toolscache.ToListerWatcherWithContext(lw)}
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
	}, nil
}

// serverSideSharding resolves --storagebucket-server-side-sharding: auto asks the API
// server.
func serverSideSharding(mode string, restCfg *rest.Config) (bool, error) {
	switch mode {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	mc, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sharding.ServerSideSupported(ctx, mc, phalanksv1beta1.GroupVersion.WithResource("storagebuckets"))
}

// memberIdentity names this replica in the ring: the pod's name, or outside a pod the
// host name and a random suffix, so two processes on one machine are two members.
func memberIdentity() (string, error) {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return "", err
	}
	return strings.ToLower(host) + "-" + hex.EncodeToString(suffix), nil
}
