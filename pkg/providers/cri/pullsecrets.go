package cri

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// keyring holds the registry credentials of a pod's image pull secrets, by
// registry location, as the kubelet's credential keyring does.
type keyring struct {
	// locations are the registry locations with credentials, most specific
	// first (reverse order, so quay.io/team comes before quay.io).
	locations []string
	creds     map[string][]*runtimeapi.AuthConfig
}

// dockerConfigEntry is a registry's entry in a docker config: a user name
// and password, or both in auth as base64("user:password").
type dockerConfigEntry struct {
	Username      string `json:"username"`
	Password      string `json:"password"`
	Auth          string `json:"auth"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// keyringFromSecrets builds the keyring of a pod's image pull secrets:
// those of type kubernetes.io/dockerconfigjson (key .dockerconfigjson, a
// config.json with "auths") and kubernetes.io/dockercfg (key .dockercfg,
// the legacy ~/.dockercfg). Secrets of other types, or without their key,
// are left out, as the kubelet leaves them out; one that cannot be read is
// an error naming the secret and key. Entries whose location is not a
// valid registry location are skipped.
func keyringFromSecrets(secrets []corev1.Secret) (*keyring, error) {
	k := &keyring{creds: map[string][]*runtimeapi.AuthConfig{}}
	for _, s := range secrets {
		var (
			key     string
			entries map[string]dockerConfigEntry
		)
		switch {
		case s.Type == corev1.SecretTypeDockerConfigJson && len(s.Data[corev1.DockerConfigJsonKey]) > 0:
			key = corev1.DockerConfigJsonKey
			var cfg struct {
				Auths map[string]dockerConfigEntry `json:"auths"`
			}
			if err := json.Unmarshal(s.Data[key], &cfg); err != nil {
				return nil, fmt.Errorf("image pull secret %s/%s: key %s: %w", s.Namespace, s.Name, key, err)
			}
			entries = cfg.Auths
		case s.Type == corev1.SecretTypeDockercfg && len(s.Data[corev1.DockerConfigKey]) > 0:
			key = corev1.DockerConfigKey
			if err := json.Unmarshal(s.Data[key], &entries); err != nil {
				return nil, fmt.Errorf("image pull secret %s/%s: key %s: %w", s.Namespace, s.Name, key, err)
			}
		default:
			continue
		}
		for _, loc := range slices.Sorted(maps.Keys(entries)) {
			auth, err := entries[loc].authConfig()
			if err != nil {
				return nil, fmt.Errorf("image pull secret %s/%s: key %s: registry %s: %w", s.Namespace, s.Name, key, loc, err)
			}
			norm, ok := registryLocation(loc)
			if !ok {
				continue
			}
			if _, seen := k.creds[norm]; !seen {
				k.locations = append(k.locations, norm)
			}
			k.creds[norm] = append(k.creds[norm], auth)
		}
	}
	slices.Sort(k.locations)
	slices.Reverse(k.locations)
	return k, nil
}

// authConfig is the entry's credentials for the runtime; auth, when set,
// holds the user name and password.
func (e dockerConfigEntry) authConfig() (*runtimeapi.AuthConfig, error) {
	a := &runtimeapi.AuthConfig{
		Username:      e.Username,
		Password:      e.Password,
		IdentityToken: e.IdentityToken,
		RegistryToken: e.RegistryToken,
	}
	if e.Auth == "" {
		return a, nil
	}
	enc := base64.RawStdEncoding
	if strings.HasSuffix(strings.TrimSpace(e.Auth), "=") {
		enc = base64.StdEncoding
	}
	decoded, err := enc.DecodeString(e.Auth)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	user, password, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return nil, errors.New("auth: must be base64(username:password)")
	}
	a.Username, a.Password = user, password
	return a, nil
}

// registryLocation normalizes a docker config location (a URL or a host
// with an optional port and path, the host possibly with wildcards such as
// *.example.com) to host[:port][/path]: no scheme, no /v1/ or /v2/ API
// prefix, no trailing slash, and Docker Hub's legacy index.docker.io as
// docker.io. False for a location that is not one.
func registryLocation(loc string) (string, bool) {
	if !strings.HasPrefix(loc, "https://") && !strings.HasPrefix(loc, "http://") {
		loc = "https://" + loc
	}
	u, err := url.Parse(loc)
	if err != nil || u.Host == "" {
		return "", false
	}
	p := u.Path
	if strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/v2/") {
		p = p[3:]
	}
	p = strings.TrimSuffix(p, "/")
	host := u.Host
	if host == dockerHubLegacyDomain {
		host = dockerHubDomain
	}
	return host + p, true
}

// lookup is the credentials to try, in order, to pull image: those of
// every location that matches the image's repository, the most specific
// first. A location matches when its host has as many labels as the
// image's registry and each label matches (wildcards like *.example.com
// match one label), its port is the same, and its path is a leading part
// of the repository's path. An invalid image has no credentials. With
// none, the image is pulled anonymously; the kubelet does not fall back to
// an anonymous pull when credentials fail.
func (k *keyring) lookup(image string) []*runtimeapi.AuthConfig {
	ref, err := parseImageRef(image)
	if err != nil {
		return nil
	}
	var auths []*runtimeapi.AuthConfig
	for _, loc := range k.locations {
		if locationMatches(loc, ref.Domain, "/"+ref.Path) {
			auths = append(auths, k.creds[loc]...)
		}
	}
	return auths
}

// locationMatches says whether a normalized registry location covers the
// repository at path on the registry domain (host[:port]).
func locationMatches(loc, domain, repoPath string) bool {
	locDomain, locPath := loc, ""
	if i := strings.IndexByte(loc, '/'); i >= 0 {
		locDomain, locPath = loc[:i], loc[i:]
	}
	locHost, locPort := splitHostPort(locDomain)
	host, port := splitHostPort(domain)
	if locPort != port {
		return false
	}
	locLabels, labels := strings.Split(locHost, "."), strings.Split(host, ".")
	if len(locLabels) != len(labels) {
		return false
	}
	for i := range labels {
		if ok, err := path.Match(locLabels[i], labels[i]); err != nil || !ok {
			return false
		}
	}
	return locPath == "" || repoPath == locPath || strings.HasPrefix(repoPath, locPath+"/")
}

func splitHostPort(domain string) (host, port string) {
	if h, p, err := net.SplitHostPort(domain); err == nil {
		return h, p
	}
	return domain, ""
}
