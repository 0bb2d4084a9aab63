// Command devcerts writes a self-signed serving certificate (tls.crt, tls.key) for the
// manager's webhook server when it runs on a developer machine (`make run`).
//
//	go run ./hack/devcerts -dir bin/dev-certs
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
)

func main() {
	dir := flag.String("dir", "bin/dev-certs", "directory to write tls.crt and tls.key into")
	flag.Parse()
	if _, err := os.Stat(filepath.Join(*dir, "tls.crt")); err == nil {
		return
	}
	if _, err := certs.WriteServing(*dir, "127.0.0.1", "localhost"); err != nil {
		fmt.Fprintln(os.Stderr, "devcerts:", err)
		os.Exit(1)
	}
}
