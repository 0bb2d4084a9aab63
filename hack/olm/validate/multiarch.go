package validate

import (
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	corev1 "k8s.io/api/core/v1"
)

// The CSV labels that declare the platforms an operator supports.
const (
	archLabel = "operatorframework.io/arch."
	osLabel   = "operatorframework.io/os."
)

// PlatformsOf returns the platforms an image reference provides (the manifests of its
// index, or the platform of a single image).
type PlatformsOf func(image string) ([]v1.Platform, error)

// MultiArch checks a bundle directory against the platforms of its images with the rules
// of operator-framework/api's MultipleArchitecturesValidator (`operator-sdk bundle
// validate --select-optional name=multiarch`). That validator reads each image's
// platforms with `docker` or `podman manifest inspect`; platformsOf reads them here, from
// the registry directly. Errors and warnings are the validator's:
//   - error: the CSV labels an architecture or OS that a manager image does not provide;
//   - warning: a manager image provides an architecture or OS the labels miss (a single
//     amd64, or linux, needs no label);
//   - warning: another Deployment image or a related image lacks a platform the manager
//     supports;
//   - warning: a manager Deployment has no required node affinity on kubernetes.io/arch
//     and kubernetes.io/os, or it allows other platforms than the image provides;
//   - warning: an image cannot be inspected.
//
// Manager images are the containers named "manager" (else every container but
// kube-rbac-proxy), as the validator picks them.
func MultiArch(dir string, platformsOf PlatformsOf) (Report, error) {
	var r Report
	b, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		return r, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	csv := b.CSV
	var labelArchs, labelOSes []string
	for k, v := range csv.Labels {
		if v != "supported" {
			continue
		}
		if a, ok := strings.CutPrefix(k, archLabel); ok {
			labelArchs = append(labelArchs, a)
		}
		if o, ok := strings.CutPrefix(k, osLabel); ok {
			labelOSes = append(labelOSes, o)
		}
	}

	inspected := map[string][]v1.Platform{}
	inspect := func(image string) ([]v1.Platform, bool) {
		if p, ok := inspected[image]; ok {
			return p, p != nil
		}
		p, err := platformsOf(image)
		if err != nil {
			r.Warnings = append(r.Warnings, fmt.Sprintf("multiarch: unable to inspect the image %s: %v", image, err))
			inspected[image] = nil
			return nil, false
		}
		inspected[image] = p
		return p, true
	}

	var managers, others []string
	affinity := map[string][]v1.Platform{}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		containers := d.Spec.Template.Spec.Containers
		hasManager := slices.ContainsFunc(containers, func(c corev1.Container) bool { return c.Name == "manager" })
		for _, c := range containers {
			isManager := c.Name == "manager" || !hasManager && c.Name != "kube-rbac-proxy"
			if isManager && !slices.Contains(managers, c.Image) {
				managers = append(managers, c.Image)
				affinity[c.Image] = affinityPlatforms(d.Spec.Template.Spec)
			} else if !isManager && !slices.Contains(others, c.Image) {
				others = append(others, c.Image)
			}
		}
	}

	// What the operator supports: the labels, plus what the manager images provide.
	archs, oses := slices.Clone(labelArchs), slices.Clone(labelOSes)
	if len(archs) == 0 {
		archs = []string{"amd64"}
	}
	if len(oses) == 0 {
		oses = []string{"linux"}
	}
	managerArchs, managerOSes := map[string]bool{}, map[string]bool{}
	for _, m := range managers {
		platforms, ok := inspect(m)
		if !ok {
			continue
		}
		for _, p := range platforms {
			managerArchs[p.Architecture], managerOSes[p.OS] = true, true
			if !slices.Contains(archs, p.Architecture) {
				archs = append(archs, p.Architecture)
			}
			if !slices.Contains(oses, p.OS) {
				oses = append(oses, p.OS)
			}
		}
		for _, a := range labelArchs {
			if !slices.ContainsFunc(platforms, func(p v1.Platform) bool { return p.Architecture == a }) {
				r.Errors = append(r.Errors, fmt.Sprintf("multiarch: the CSV labels architecture %s, which the manager image %s does not provide", a, m))
			}
		}
		for _, o := range labelOSes {
			if !slices.ContainsFunc(platforms, func(p v1.Platform) bool { return p.OS == o }) {
				r.Errors = append(r.Errors, fmt.Sprintf("multiarch: the CSV labels OS %s, which the manager image %s does not provide", o, m))
			}
		}
		if extra, missing := comparePlatforms(affinity[m], platforms); len(affinity[m]) == 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("multiarch: the CSV has no node affinity for the image %s, which supports %v", m, platforms))
		} else if len(extra)+len(missing) > 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("multiarch: the node affinity of the image %s allows %v it does not provide and leaves out %v it does", m, extra, missing))
		}
	}
	for a := range managerArchs {
		if !slices.Contains(labelArchs, a) && (a != "amd64" || len(managerArchs) != 1) {
			r.Warnings = append(r.Warnings, fmt.Sprintf("multiarch: the CSV misses the label %s%s: its manager image provides it", archLabel, a))
		}
	}
	for o := range managerOSes {
		if !slices.Contains(labelOSes, o) && (o != "linux" || len(managerOSes) != 1) {
			r.Warnings = append(r.Warnings, fmt.Sprintf("multiarch: the CSV misses the label %s%s: its manager image provides it", osLabel, o))
		}
	}
	related := make([]string, 0, len(csv.Spec.RelatedImages))
	for _, ri := range csv.Spec.RelatedImages {
		related = append(related, ri.Image)
	}
	for _, image := range slices.Concat(others, related) {
		platforms, ok := inspect(image)
		if !ok {
			continue
		}
		for _, a := range archs {
			if !slices.ContainsFunc(platforms, func(p v1.Platform) bool { return p.Architecture == a }) {
				r.Warnings = append(r.Warnings, fmt.Sprintf("multiarch: the image %s does not provide architecture %s, which the operator supports", image, a))
			}
		}
		for _, o := range oses {
			if !slices.ContainsFunc(platforms, func(p v1.Platform) bool { return p.OS == o }) {
				r.Warnings = append(r.Warnings, fmt.Sprintf("multiarch: the image %s does not provide OS %s, which the operator supports", image, o))
			}
		}
	}
	return r, nil
}

// affinityPlatforms lists the platforms a pod's required node affinity allows: every
// OS and architecture pair of each term's kubernetes.io/os and kubernetes.io/arch In
// expressions.
func affinityPlatforms(spec corev1.PodSpec) []v1.Platform {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []v1.Platform
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		var archs, oses []string
		for _, e := range term.MatchExpressions {
			if e.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			switch e.Key {
			case "kubernetes.io/arch":
				archs = e.Values
			case "kubernetes.io/os":
				oses = e.Values
			}
		}
		for _, o := range oses {
			for _, arch := range archs {
				out = append(out, v1.Platform{OS: o, Architecture: arch})
			}
		}
	}
	return out
}

// comparePlatforms returns the platforms affinity allows that the image lacks, and those
// the image provides that affinity leaves out (OS and architecture only).
func comparePlatforms(affinity, image []v1.Platform) (extra, missing []string) {
	has := func(list []v1.Platform, p v1.Platform) bool {
		return slices.ContainsFunc(list, func(q v1.Platform) bool { return q.OS == p.OS && q.Architecture == p.Architecture })
	}
	for _, p := range affinity {
		if !has(image, p) {
			extra = append(extra, p.OS+"/"+p.Architecture)
		}
	}
	for _, p := range image {
		if !has(affinity, p) {
			missing = append(missing, p.OS+"/"+p.Architecture)
		}
	}
	return extra, missing
}
