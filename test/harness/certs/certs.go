// Package certs issues short-lived test certificates: a CA and leaf certificates for
// loopback servers (kube-apiserver, webhook servers, MinIO with TLS).
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that signs leaf certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is the CA certificate, PEM encoded, for clients' trust bundles.
	CertPEM []byte
}

// Pair is a leaf certificate and its key, PEM encoded.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
	Cert    *x509.Certificate
}

// NewCA creates a self-signed CA valid for a day.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LeafOptions describes a leaf certificate.
type LeafOptions struct {
	CommonName   string
	Organization []string
	// Hosts are DNS names or IP addresses for the subject alternative names.
	Hosts []string
	// Client makes a client-authentication certificate instead of a server one.
	Client bool
	// NotAfter defaults to a day from now; a time in the past yields an expired certificate.
	NotAfter time.Time
}

// Issue signs a leaf certificate.
func (ca *CA) Issue(o LeafOptions) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	notAfter := o.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	notBefore := time.Now().Add(-time.Hour)
	if notAfter.Before(notBefore) {
		notBefore = notAfter.Add(-time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: o.Organization},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if o.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", o.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Pair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", keyDER), Cert: cert}, nil
}

// Write stores the pair as dir/certName and dir/keyName with private permissions.
func (p *Pair) Write(dir, certName, keyName string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, certName), p.CertPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, keyName), p.KeyPEM, 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}

// Serving names the files of a serving certificate as controller-runtime's webhook
// server, OLM and cert-manager's Secrets lay them out.
const (
	ServingCert = "tls.crt"
	ServingKey  = "tls.key"
)

// WriteServing issues, from a new CA, a serving certificate for hosts (the first is the
// common name) into dir as tls.crt and tls.key, for a webhook server a test runs, and
// returns the CA for its clients to trust.
func WriteServing(dir string, hosts ...string) (*CA, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("a serving certificate needs a host")
	}
	ca, err := NewCA("phalanks-test-serving-ca")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(LeafOptions{CommonName: hosts[0], Hosts: hosts})
	if err != nil {
		return nil, err
	}
	return ca, pair.Write(dir, ServingCert, ServingKey)
}
