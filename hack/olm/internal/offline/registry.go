// Package offline holds what the OLM libraries need to be handed when they work on
// directories only.
package offline

import (
	"context"
	"errors"

	"github.com/operator-framework/operator-registry/pkg/image"
)

// Registry satisfies operator-registry's image registry for code paths that never pull:
// validating and rendering bundle directories. Every image operation fails.
type Registry struct{}

var errNoImages = errors.New("no image registry here: bundles are read from directories")

// Pull fails: nothing is pulled.
func (Registry) Pull(context.Context, image.Reference) error { return errNoImages }

// Unpack fails: nothing is pulled.
func (Registry) Unpack(context.Context, image.Reference, string) error { return errNoImages }

// Labels fails: nothing is pulled.
func (Registry) Labels(context.Context, image.Reference) (map[string]string, error) {
	return nil, errNoImages
}

// Destroy has nothing to clean up.
func (Registry) Destroy() error { return nil }
