// Package storagemigration moves every object of a CRD to its storage version after an
// upgrade, then trims the CRD's status.storedVersions, so that a later release may stop
// serving an old version without stranding objects still encoded in it.
package storagemigration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The migrator needs to rewrite the objects and to trim storedVersions of its own CRD only.
// +kubebuilder:rbac:groups=phalanks.io,resources=storagebuckets,verbs=get;list;update
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get,resourceNames=storagebuckets.phalanks.io
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,verbs=update;patch,resourceNames=storagebuckets.phalanks.io

const defaultPageSize = 500

// Migrator is a leader-only Runnable that migrates one CRD once per start.
type Migrator struct {
	// CRDName names the CustomResourceDefinition, e.g. storagebuckets.phalanks.io.
	CRDName string
	// Reader reads straight from the API server (the manager's APIReader): the CRD and
	// the objects are not worth caching for a one-off pass.
	Reader client.Reader
	// Writer writes the objects and the CRD status.
	Writer client.Client
	Log    logr.Logger
	// PageSize bounds each list request (default 500).
	PageSize int64
	// RetryInitial is the first delay before retrying a failed pass (default 1s,
	// doubling up to five minutes).
	RetryInitial time.Duration
	// Before, when set, runs first in every pass: a pass whose Before fails changes
	// nothing and is retried. What must be decided while storedVersions still lists the
	// old versions (the grandfathered Secret references) is decided here.
	Before func(context.Context) error
}

// Result says what one migration pass did.
type Result struct {
	// StorageVersion is the CRD's storage version.
	StorageVersion string
	// Rewritten counts the objects written back through the storage version.
	Rewritten int
	// Trimmed is true when storedVersions was reduced to the storage version.
	Trimmed bool
}

// Start runs Migrate until it succeeds or the manager stops. A failing pass is logged
// and retried with backoff; it never stops the manager.
func (m *Migrator) Start(ctx context.Context) error {
	initial := m.RetryInitial
	if initial == 0 {
		initial = time.Second
	}
	backoff := wait.Backoff{Duration: initial, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Minute}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		res, err := m.Migrate(ctx)
		if err != nil {
			m.Log.Error(err, "storage migration failed; retrying", "crd", m.CRDName)
			return false, nil
		}
		if res.Trimmed {
			m.Log.Info("storage migration done", "crd", m.CRDName, "storageVersion", res.StorageVersion, "rewritten", res.Rewritten)
		}
		return true, nil
	})
	if err != nil && !errors.Is(err, context.Canceled) && !wait.Interrupted(err) {
		return err
	}
	return nil
}

// Migrate rewrites every object when storedVersions lists more than the storage
// version, then trims storedVersions. It does nothing when only the storage version is
// listed.
func (m *Migrator) Migrate(ctx context.Context) (Result, error) {
	if m.Before != nil {
		if err := m.Before(ctx); err != nil {
			return Result{}, err
		}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := m.Reader.Get(ctx, client.ObjectKey{Name: m.CRDName}, crd); err != nil {
		return Result{}, fmt.Errorf("get CRD %s: %w", m.CRDName, err)
	}
	res := Result{StorageVersion: storageVersion(crd)}
	if res.StorageVersion == "" {
		return res, fmt.Errorf("CRD %s has no storage version", m.CRDName)
	}
	if slices.Equal(crd.Status.StoredVersions, []string{res.StorageVersion}) {
		return res, nil
	}
	listGVK := schema.GroupVersionKind{Group: crd.Spec.Group, Version: res.StorageVersion, Kind: crd.Spec.Names.ListKind}
	var err error
	if res.Rewritten, err = m.rewriteAll(ctx, listGVK); err != nil {
		return res, err
	}
	base := crd.DeepCopy()
	crd.Status.StoredVersions = []string{res.StorageVersion}
	if err := m.Writer.Status().Patch(ctx, crd, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return res, fmt.Errorf("trim storedVersions of %s: %w", m.CRDName, err)
	}
	res.Trimmed = true
	return res, nil
}

// rewriteAll writes every object back unchanged. The API server encodes the write in
// the storage version; an object someone else wrote meanwhile (Conflict) or deleted
// (NotFound) needs no rewrite.
func (m *Migrator) rewriteAll(ctx context.Context, listGVK schema.GroupVersionKind) (int, error) {
	pageSize := m.PageSize
	if pageSize == 0 {
		pageSize = defaultPageSize
	}
	rewritten, token := 0, ""
	for {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(listGVK)
		if err := m.Reader.List(ctx, list, client.Limit(pageSize), client.Continue(token)); err != nil {
			return rewritten, fmt.Errorf("list %s: %w", listGVK.Kind, err)
		}
		for i := range list.Items {
			err := m.Writer.Update(ctx, &list.Items[i])
			switch {
			case err == nil:
				rewritten++
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			default:
				return rewritten, fmt.Errorf("rewrite %s/%s: %w", list.Items[i].GetNamespace(), list.Items[i].GetName(), err)
			}
		}
		if token = list.GetContinue(); token == "" {
			return rewritten, nil
		}
	}
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}
