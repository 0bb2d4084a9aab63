// Package kubeconfig writes kubeconfig files for the processes the harnesses start
// (control plane components, the kubelet, kubectl, managers run out of cluster).
package kubeconfig

import (
	"errors"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Config is one user of one cluster.
type Config struct {
	// Server is the API server's URL; CAFile the CA that signed its certificate.
	Server string
	CAFile string
	// User names the user in the file.
	User string
	// Token, or CertFile and KeyFile, authenticate the user.
	Token             string
	CertFile, KeyFile string
	// Namespace is the context's default namespace ("" for none).
	Namespace string
}

// Write writes the kubeconfig to path, readable by its owner only.
func Write(path string, c Config) error {
	if c.Server == "" || c.User == "" {
		return errors.New("kubeconfig needs a server and a user")
	}
	if (c.Token == "") == (c.CertFile == "") {
		return errors.New("kubeconfig needs a token or a client certificate, not both")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthority: c.CAFile}
	cfg.AuthInfos[c.User] = &clientcmdapi.AuthInfo{Token: c.Token, ClientCertificate: c.CertFile, ClientKey: c.KeyFile}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: c.User, Namespace: c.Namespace}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}
