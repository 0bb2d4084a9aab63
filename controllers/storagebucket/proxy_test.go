package storagebucket

import (
	"flag"
	"net/http"
	"strings"
	"testing"
)

func TestStorageBucketProxyFlags(t *testing.T) {
	for _, tc := range []struct {
		proxy, noProxy string
		// err is a part of the message; empty means accepted.
		err string
	}{
		{proxy: "", noProxy: ""},
		{proxy: "http://proxy.corp.example:3128"},
		{proxy: "https://proxy.corp.example", noProxy: ".corp.example,10.0.0.0/8"},
		{proxy: "socks5://10.1.2.3:1080"},
		{proxy: "ftp://proxy.corp.example", err: "the scheme must be http, https or socks5"},
		{proxy: "proxy.corp.example:3128", err: "the scheme must be"},
		{proxy: "http://", err: "has no host"},
		{proxy: "http://user:hunter2@proxy.corp.example:3128", err: "holds credentials"},
		{proxy: "http://proxy.corp.example:3128/path?q=1", err: "a scheme, a host and a port only"},
		{proxy: "http://proxy.corp.example:3128\x7f", err: "not a URL"},
		{noProxy: ".corp.example", err: "--storagebucket-no-proxy is set without --storagebucket-proxy"},
	} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		o.BindFlags(fs)
		err := fs.Parse([]string{"--storagebucket-proxy=" + tc.proxy, "--storagebucket-no-proxy=" + tc.noProxy})
		if err == nil {
			err = o.ValidateProxy()
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q, %q: %v", tc.proxy, tc.noProxy, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q, %q: error %v, want one with %q", tc.proxy, tc.noProxy, err, tc.err)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("the error shows the proxy's password: %v", err)
		}
	}
}

func TestStorageBucketProxyChoosesPerEndpoint(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://from-the-environment.example:3128")
	t.Setenv("HTTP_PROXY", "http://from-the-environment.example:3128")
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--storagebucket-proxy=http://proxy.corp.example:3128",
		"--storagebucket-no-proxy=.direct.example,192.0.2.0/24"}); err != nil {
		t.Fatal(err)
	}
	choose := o.proxyFunc()
	for endpoint, want := range map[string]string{
		"https://s3.eu-west-1.amazonaws.com/bucket": "http://proxy.corp.example:3128",
		"http://minio.tenant.example:9000/bucket":   "http://proxy.corp.example:3128",
		"https://rgw.direct.example/bucket":         "",
		"https://192.0.2.7:9000/bucket":             "",
		"https://198.51.100.7:9000/bucket":          "http://proxy.corp.example:3128",
	} {
		req, err := http.NewRequest(http.MethodGet, endpoint, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := choose(req)
		if err != nil {
			t.Fatal(err)
		}
		through := ""
		if got != nil {
			through = got.String()
		}
		if through != want {
			t.Errorf("%s goes through %q, want %q", endpoint, through, want)
		}
	}

	o = Options{}
	if o.proxyFunc() != nil {
		t.Error("without --storagebucket-proxy the environment must decide (a nil proxy function)")
	}
}
