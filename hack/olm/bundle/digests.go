package bundle

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/phalanks/phalanks-operator/internal/imagebuild"
)

// PinImage returns image by the digest its registry holds for it, as operator-sdk's
// `generate bundle --use-image-digests` (USE_IMAGE_DIGESTS) resolves the CSV's images:
// the image must have been pushed. A reference by digest is returned as it is.
// plainHTTP talks HTTP to a registry without TLS.
func PinImage(ctx context.Context, image string, plainHTTP bool) (string, error) {
	if image == "" {
		return "", errors.New("pinning by digest needs an image reference")
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	if _, byDigest := ref.(name.Digest); byDigest {
		return image, nil
	}
	digest, err := imagebuild.Resolve(ctx, image, imagebuild.Options{Insecure: plainHTTP})
	if err != nil {
		return "", fmt.Errorf("%w (push it first: make docker-push)", err)
	}
	return ref.Context().Digest(digest.String()).String(), nil
}
