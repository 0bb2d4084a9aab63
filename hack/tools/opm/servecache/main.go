// Command servecache builds `opm serve`'s cache for a file-based catalog directory, in
// operator-registry's JSON format, for the catalog image:
//
//	servecache CONFIGS_DIR CACHE_DIR
//
// opm serve --cache-only writes its default format (pogreb), whose hash seed is random, so
// two builds of the same catalog differ and the image would not be reproducible; opm also
// opens that format read-write when it serves. The JSON format comes out the same every
// time and is only read. `opm serve CONFIGS --cache-dir=CACHE` finds it by its files,
// checks its digest against the catalog (--cache-enforce-integrity, on by default) and
// serves from it. The digest covers the file modes of the catalog and of the cache, so
// both must reach the image with the modes they have here (0750 directories and 0640
// files for the cache, as operator-registry writes them).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/operator-framework/operator-registry/pkg/cache"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: servecache CONFIGS_DIR CACHE_DIR")
		os.Exit(2)
	}
	if err := build(context.Background(), os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "servecache:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, configs, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	c, err := cache.New(dir, cache.WithFormat(cache.FormatJSON))
	if err != nil {
		return err
	}
	if err := c.Build(ctx, os.DirFS(configs)); err != nil {
		return fmt.Errorf("build the cache of %s: %w", configs, err)
	}
	return c.Close()
}
