// Package validate checks a bundle directory the way `operator-sdk bundle validate
// --select-optional suite=operatorframework` does, with the libraries that command is
// built on: operator-registry's bundle format validator, then operator-framework/api's
// default bundle validators and the OperatorHub (operatorframework suite) validators.
package validate

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	apierrors "github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
	registrybundle "github.com/operator-framework/operator-registry/pkg/lib/bundle"
	"github.com/sirupsen/logrus"

	"github.com/phalanks/phalanks-operator/hack/olm/internal/offline"
)

// Report holds what the validators found, each entry prefixed with the validator's name.
type Report struct {
	Errors   []string
	Warnings []string
}

// OK reports whether there were neither errors nor warnings.
func (r Report) OK() bool { return len(r.Errors) == 0 && len(r.Warnings) == 0 }

func (r *Report) add(source string, results []apierrors.ManifestResult) {
	for _, res := range results {
		for _, e := range res.Errors {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %s", source, e.Error()))
		}
		for _, w := range res.Warnings {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %s", source, w.Error()))
		}
	}
}

// OperatorFrameworkSuite is the optional validators `--select-optional
// suite=operatorframework` runs, by the names operator-sdk lists them under.
var OperatorFrameworkSuite = []struct {
	Name      string
	Validator interfaces.Validator
}{
	{"operatorhubv2", apivalidation.OperatorHubV2Validator},
	{"capabilities", apivalidation.StandardCapabilitiesValidator},
	{"categories", apivalidation.StandardCategoriesValidator},
	{"alpha-deprecated-apis", apivalidation.AlphaDeprecatedAPIsValidator},
	{"good-practices", apivalidation.GoodPracticesValidator},
}

// Bundle validates the bundle directory dir (the one holding manifests/ and metadata/).
// optionalValues are passed to the optional validators as operator-sdk's
// --optional-values are (e.g. "k8s-version": "1.36").
func Bundle(dir string, optionalValues map[string]string) (Report, error) {
	r := Report{Errors: Format(dir)}
	val := registrybundle.NewImageValidator(offline.Registry{}, quietLogger())
	if err := val.ValidateBundleContent(filepath.Join(dir, registrybundle.ManifestsDir)); err != nil {
		r.Errors = append(r.Errors, validationErrors("bundle content", err)...)
	}

	b, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		return r, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	// ObjectsToValidate holds the CRDs, the CSV and every other object of the bundle.
	objs := b.ObjectsToValidate()
	r.add("default", apivalidation.DefaultBundleValidators.Validate(objs...))

	if optionalValues == nil {
		optionalValues = map[string]string{}
	}
	objs = append(objs, optionalValues)
	for _, v := range OperatorFrameworkSuite {
		r.add(v.Name, v.Validator.Validate(objs...))
	}
	return r, nil
}

// Format runs operator-registry's bundle format validator on dir: manifests/ and
// metadata/ exist, the annotations are complete and match the manifests' media type.
func Format(dir string) []string {
	val := registrybundle.NewImageValidator(offline.Registry{}, quietLogger())
	if err := val.ValidateBundleFormat(dir); err != nil {
		return validationErrors("bundle format", err)
	}
	return nil
}

// validationErrors flattens operator-registry's ValidationError into one line per error.
func validationErrors(source string, err error) []string {
	var ve registrybundle.ValidationError
	if errors.As(err, &ve) {
		out := make([]string, 0, len(ve.Errors))
		for _, e := range ve.Errors {
			out = append(out, fmt.Sprintf("%s: %v", source, e))
		}
		return out
	}
	return []string{fmt.Sprintf("%s: %v", source, err)}
}

func quietLogger() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}
