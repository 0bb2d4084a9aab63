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

// Impersonating writes to dst a copy of the kubeconfig at src whose requests act as
// user (in groups): the credentials of src's user, who must be allowed to impersonate,
// and the permissions of user. Tests run command-line tools as a user of their RBAC
// this way.
func Impersonating(src, dst, user string, groups ...string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return err
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.AuthInfos[ctx.AuthInfo] == nil {
		return errors.New("kubeconfig " + src + " has no current context with a user")
	}
	auth := cfg.AuthInfos[ctx.AuthInfo].DeepCopy()
	auth.Impersonate, auth.ImpersonateGroups = user, groups
	cfg.AuthInfos[user] = auth
	ctx = ctx.DeepCopy()
	ctx.AuthInfo = user
	cfg.Contexts[user] = ctx
	cfg.CurrentContext = user
	return clientcmd.WriteToFile(*cfg, dst)
}
