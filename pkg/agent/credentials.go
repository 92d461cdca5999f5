package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/nodecert"
)

// credentials are how the agent authenticates to the API server.
type credentials struct {
	config *rest.Config
	// renew keeps a client certificate from TLS bootstrap current; nil
	// without TLS bootstrap.
	renew func(context.Context) error
}

// loadCredentials resolves the agent's client configuration: with TLS
// bootstrap, the node's own client certificate (requested when none is
// kept); else the client config or kubeconfig given, or the pod's service
// account. Its requests carry the agent's limits, content type and user
// agent.
func (a *Agent) loadCredentials(ctx context.Context) (*credentials, error) {
	src := a.s.client
	var creds credentials
	var err error
	switch {
	case src.bootstrap != "":
		if creds.config, creds.renew, err = a.bootstrapCredentials(ctx); err != nil {
			return nil, err
		}
	case src.config != nil:
		creds.config = rest.CopyConfig(src.config)
	case src.kubeconfig != "":
		if _, err := os.Stat(src.kubeconfig); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", src.kubeconfig, err)
		}
		if creds.config, err = clientcmd.BuildConfigFromFlags("", src.kubeconfig); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", src.kubeconfig, err)
		}
	default:
		if creds.config, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("no kubeconfig given and not running in a cluster: %w", err)
		}
	}
	creds.config.QPS, creds.config.Burst = a.s.qps, a.s.burst
	creds.config.UserAgent = "nodelet/" + a.s.version
	creds.config.ContentType, creds.config.AcceptContentTypes = a.s.contentType, a.s.contentType
	if a.s.contentType == config.ContentTypeProtobuf {
		// JSON too, which every resource has, after protobuf, which
		// not every resource has.
		creds.config.AcceptContentTypes += "," + config.ContentTypeJSON
	}
	return &creds, nil
}

// bootstrapCredentials is TLS bootstrap: the one node's identity, its
// certificate kept under the root dir's pki, and the kubeconfig (default
// <root dir>/kubeconfig) written to use it. A kubeconfig that exists with
// other credentials is refused rather than overwritten.
func (a *Agent) bootstrapCredentials(ctx context.Context) (*rest.Config, func(context.Context) error, error) {
	dir := filepath.Join(a.s.rootDir, "pki")
	kubeconfig := a.s.client.kubeconfig
	if kubeconfig == "" {
		kubeconfig = filepath.Join(a.s.rootDir, "kubeconfig")
	}
	if err := ownedKubeconfig(kubeconfig, filepath.Join(dir, nodecert.Client.File)); err != nil {
		return nil, nil, err
	}
	rc, certs, err := nodecert.ClientConfig(ctx, a.nodes.nodes[0].Name, nodecert.ClientOptions{
		BootstrapKubeconfig: a.s.client.bootstrap, Kubeconfig: kubeconfig, Dir: dir,
	})
	if err != nil {
		return nil, nil, err
	}
	return rc, certs.Run, nil
}

// ownedKubeconfig fails when path is a kubeconfig whose credentials are not
// the certificate in certFile: TLS bootstrap would overwrite it.
func ownedKubeconfig(path, certFile string) error {
	existing, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	for name, auth := range existing.AuthInfos {
		if auth.ClientCertificate != certFile || auth.ClientKey != certFile || auth.Token != "" || auth.Exec != nil {
			return fmt.Errorf("kubeconfig %s: user %q has other credentials than the bootstrapped certificate %s; "+
				"with bootstrap nodelet writes this file: name a new one", path, name, certFile)
		}
	}
	return nil
}
