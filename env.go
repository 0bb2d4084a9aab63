package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/phalanks/phalanks-operator/internal/clockoffset"
)

// envPrefix starts the name of every flag's environment variable. A Subscription's
// spec.config.env sets environment variables, not arguments, and OLM keeps it across
// upgrades: under OLM this is how a setting is changed for good.
const envPrefix = "PHALANKS_"

// envName is the environment variable of the flag name: PHALANKS_ and the name in upper
// case, its dashes as underscores (--zap-log-level: PHALANKS_ZAP_LOG_LEVEL).
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// notFlags are variables with the prefix that are read elsewhere, not flags.
var notFlags = map[string]bool{clockoffset.EnvVar: true}

// setFromEnv gives every flag that the command line left unset the value of its
// environment variable, when that is set: a flag wins over its variable, and the
// variable over the default. A value the flag does not accept is an error naming the
// variable and the value. It returns the variables with the prefix that name no flag
// (a typo, most likely), sorted.
func setFromEnv(fs *flag.FlagSet, environ []string) (unknown []string, err error) {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	flags := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { flags[envName(f.Name)] = f.Name })
	var errs []error
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, envPrefix) || notFlags[k] {
			continue
		}
		name, ok := flags[k]
		switch {
		case !ok:
			unknown = append(unknown, k)
		case onCommandLine[name]:
		default:
			if err := fs.Set(name, v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q (--%s): %w", k, v, name, err))
			}
		}
	}
	sort.Strings(unknown)
	return unknown, errors.Join(errs...)
}

// environ is the process's environment; tests replace it.
var environ = os.Environ
