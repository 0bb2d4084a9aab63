// Package imagebuild builds OCI images without a container runtime, with
// go-containerregistry: a layer from a list of files, directories and symlinks (numeric
// owners and modes, every modification time fixed, so the same inputs give the same
// digest), an image config (entrypoint, cmd, user, env, working directory, labels,
// exposed ports, platform), multi-platform indexes, and cross-compiled static Go binaries
// to put in them. It writes images to any registry (plain HTTP for loopback and private
// addresses, or on request), to an OCI image layout directory or to a docker-archive
// tarball, and reads them back. StartRegistry serves go-containerregistry's OCI registry
// on a loopback port, for tests and for a local node to pull from.
//
// The project's own images (operator, bundle, catalog, scorecard tests) are defined in
// hack/olm/images on top of this package; test harnesses build small images (pause, test
// applications) with it directly.
package imagebuild
