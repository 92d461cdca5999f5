package main

// Joining nodes as kubeadm sets a cluster up for it: the apiserver accepts
// bootstrap tokens and runs NodeRestriction, the controller-manager signs
// and cleans tokens, and the bindings let a token's holder ask for a node
// client certificate that the controller-manager approves, and a node renew
// its own. "up" keeps one token in bootstrap.kubeconfig (the same across
// restarts of one directory, valid a day from the last start).

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	applyrbacv1 "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	// bootstrapGroup is the group a token's holder authenticates in, as
	// kubeadm names it.
	bootstrapGroup = "system:bootstrappers:kubeadm:default-node-token"
	// nodeletNodeRole grants nodes what nodelet needs beyond the Node
	// authorizer.
	nodeletNodeRole = "nodelet:node"
	// bootstrapTokenTTL is how long the token is valid after each "up".
	bootstrapTokenTTL = 24 * time.Hour
)

// bootstrapAPIServerArgs are the apiserver flags for joining nodes.
func bootstrapAPIServerArgs() []string {
	return []string{"--enable-bootstrap-token-auth", "--enable-admission-plugins=NodeRestriction"}
}

// bootstrapControllerArgs are the controller-manager flags for joining
// nodes: the token controllers are off by default.
func bootstrapControllerArgs() []string {
	return []string{"--controllers=*,bootstrapsigner,tokencleaner"}
}

var tokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// setUpBootstrap applies the bindings and the token's Secret, and writes
// path, a kubeconfig with the token for server, trusting caFile.
func setUpBootstrap(ctx context.Context, cfg *rest.Config, path, server, caFile string) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	apply := metav1.ApplyOptions{FieldManager: upFieldManager, Force: true}
	// What nodelet needs beyond the Node authorizer: its volume informers
	// list claims, volumes and attachments cluster-wide, and its
	// attach/detach controller creates and deletes VolumeAttachments.
	role := applyrbacv1.ClusterRole(nodeletNodeRole).
		WithRules(
			applyrbacv1.PolicyRule().WithAPIGroups("").WithResources("persistentvolumes", "persistentvolumeclaims").
				WithVerbs("get", "list", "watch"),
			applyrbacv1.PolicyRule().WithAPIGroups("storage.k8s.io").WithResources("volumeattachments").
				WithVerbs("get", "list", "watch", "create", "delete"))
	if _, err := client.RbacV1().ClusterRoles().Apply(ctx, role, apply); err != nil {
		return fmt.Errorf("cluster role %s: %w", nodeletNodeRole, err)
	}

	// kubeadm's three bindings (a token's holder may create CSRs and have
	// its node client CSR approved; a node may have its renewal approved),
	// and nodelet's role for the nodes.
	bindings := []struct{ name, role, group string }{
		{"kubeadm:kubelet-bootstrap", "system:node-bootstrapper", bootstrapGroup},
		{"kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrapGroup},
		{"kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
		{nodeletNodeRole, nodeletNodeRole, "system:nodes"},
	}
	for _, b := range bindings {
		binding := applyrbacv1.ClusterRoleBinding(b.name).
			WithRoleRef(applyrbacv1.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(b.role)).
			WithSubjects(applyrbacv1.Subject().WithAPIGroup("rbac.authorization.k8s.io").WithKind("Group").WithName(b.group))
		if _, err := client.RbacV1().ClusterRoleBindings().Apply(ctx, binding, apply); err != nil {
			return fmt.Errorf("cluster role binding %s: %w", b.name, err)
		}
	}

	id, secret, err := keptToken(path)
	if err != nil {
		return err
	}
	name := "bootstrap-token-" + id
	tokenSecret := applycorev1.Secret(name, metav1.NamespaceSystem).
		WithType(corev1.SecretTypeBootstrapToken).
		WithStringData(map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(bootstrapTokenTTL).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              bootstrapGroup,
			"description":                    "nodelet's local control plane: joins nodes (controlplane up)",
		})
	if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Apply(ctx, tokenSecret, apply); err != nil {
		return fmt.Errorf("secret %s/%s: %w", metav1.NamespaceSystem, name, err)
	}

	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	kc.AuthInfos["bootstrap"] = &clientcmdapi.AuthInfo{Token: id + "." + secret}
	kc.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "bootstrap"}
	kc.CurrentContext = "bootstrap"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("bootstrap kubeconfig: %w", err)
	}
	return nil
}

// keptToken is the token of the bootstrap kubeconfig at path, or a new one
// when there is none.
func keptToken(path string) (id, secret string, err error) {
	kc, err := clientcmd.LoadFromFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", "", fmt.Errorf("bootstrap kubeconfig %s: %w", path, err)
	default:
		if auth := kc.AuthInfos["bootstrap"]; auth != nil {
			if m := tokenPattern.FindStringSubmatch(auth.Token); m != nil {
				return m[1], m[2], nil
			}
		}
	}
	return randomToken(6), randomToken(16), nil
}

// randomToken is n random characters of a bootstrap token's alphabet.
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b) // never fails
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// bootstrapKubeconfigPath is where "up" writes the bootstrap kubeconfig.
func bootstrapKubeconfigPath(dir string) string { return filepath.Join(dir, "bootstrap.kubeconfig") }
