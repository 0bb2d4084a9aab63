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
	ca, err := certs.NewCA("phalanks-dev-ca")
	if err == nil {
		var pair *certs.Pair
		if pair, err = ca.Issue(certs.LeafOptions{CommonName: "phalanks-webhook", Hosts: []string{"127.0.0.1", "localhost"}}); err == nil {
			err = pair.Write(*dir, "tls.crt", "tls.key")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcerts:", err)
		os.Exit(1)
	}
}
