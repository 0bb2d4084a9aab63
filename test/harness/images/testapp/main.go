// Command testapp is the small web server the real-node tests run where users would run
// their own application (nginx cannot be pulled here): Foo's Deployments and the scaling
// tests' workloads run it. It answers every path with the pod's name, stops on SIGTERM at
// once (so pods terminate without waiting out their grace period), and, as
// `testapp get URL`, fetches a URL and prints the body, for checks from inside a pod.
//
//	testapp [-listen :8080]
//	testapp get URL
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "get" {
		if err := get(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "testapp:", err)
			os.Exit(1)
		}
		return
	}
	listen := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	if err := serve(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	name, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, "testapp %s\n", name)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 1)
	go func() { errs <- srv.ListenAndServe() }()
	fmt.Printf("testapp %s serving on %s\n", name, addr)
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func get(url string) error {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url) //nolint:gosec // G107: the URL is the command's argument
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
