package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/phalanks/phalanks-operator/test/harness/dns"
)

// serviceHostsInterval is how often the sandbox's /etc/hosts follows the Services.
const serviceHostsInterval = time.Second

// Processes in the sandbox that address Services by name (OLM's catalog operator dials a
// registry pod's Service as <name>.<namespace>.svc) find them in /etc/hosts: the node
// binds a file of its own over it, the host's entries followed by one line per Service
// with a ClusterIP, kept in step with the Services. Pods keep their own /etc/hosts and
// reach Services by ClusterIP and environment variables, as they do on a cluster without
// DNS, or by name through the cluster DNS server (Options.ClusterDNS), which answers
// from the same list.

// hostsFile is the file bound over /etc/hosts.
func (n *node) hostsFile() string { return filepath.Join(n.dir, "etc", "hosts") }

// bindHosts writes the host's /etc/hosts into the node's file and binds it over
// /etc/hosts.
func (n *node) bindHosts() error {
	base, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return err
	}
	n.baseHosts = base
	if err := writeFile(n.hostsFile(), base); err != nil {
		return err
	}
	return bindFile(n.hostsFile(), "/etc/hosts")
}

// followServices rewrites the hosts file whenever the Services' ClusterIPs change, until
// ctx ends.
func (n *node) followServices(ctx context.Context, cs kubernetes.Interface) {
	var last []byte
	for {
		if content, err := n.serviceHosts(ctx, cs); err == nil && !bytes.Equal(content, last) {
			// In place: a rename would leave the bind mount on the old file. The Go resolver
			// notices the new modification time.
			if err := os.WriteFile(n.hostsFile(), content, 0o600); err == nil {
				last = content
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(serviceHostsInterval):
		}
	}
}

// serviceHosts returns the hosts file for the Services, and records their addresses for
// the cluster DNS server.
func (n *node) serviceHosts(ctx context.Context, cs kubernetes.Interface) ([]byte, error) {
	svcs, err := cs.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var lines []string
	ips := map[string]netip.Addr{}
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		name := s.Name + "." + s.Namespace + ".svc"
		lines = append(lines, fmt.Sprintf("%s\t%s %s.%s\n", s.Spec.ClusterIP, name, name, ClusterDomain))
		if ip, err := netip.ParseAddr(s.Spec.ClusterIP); err == nil {
			ips[name], ips[name+"."+ClusterDomain] = ip, ip
		}
	}
	n.serviceIPs.Store(&ips)
	slices.Sort(lines)
	var b bytes.Buffer
	b.Write(n.baseHosts)
	b.WriteString("\n# Services of the local cluster (test/harness/cluster)\n")
	for _, l := range lines {
		b.WriteString(l)
	}
	return b.Bytes(), nil
}

// startDNS serves the Services' names on the node's address, port 53, when the cluster
// runs cluster DNS. It answers from the list followServices keeps, which it reads every
// second: a Service is resolvable within a second or two of its creation.
func (n *node) startDNS() error {
	if !n.c.o.ClusterDNS {
		return nil
	}
	s, err := dns.StartOn(net.JoinHostPort(NodeIP, "53"), func(name string) []netip.Addr {
		ips := n.serviceIPs.Load()
		if ips == nil {
			return nil
		}
		if ip, ok := (*ips)[name]; ok {
			return []netip.Addr{ip}
		}
		return nil
	})
	if err != nil {
		return err
	}
	n.dns = s
	return nil
}
