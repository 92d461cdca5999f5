package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"
)

// reviewBackoff paces retries of token and access reviews that fail.
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// auth authenticates and authorizes requests.
type auth struct {
	authn    authenticator.Request
	authz    authorizer.Authorizer
	nodeName string
	pods     PodNodeResolver     // nil when the backend cannot tell
	addrs    NodeAddressResolver // nil when the backend cannot tell
}

// newAuth builds the authenticator and authorizer. With a client CA file it
// also asks TLS clients for their certificate and starts watching the file
// until ctx ends.
func (s *Server) newAuth(ctx context.Context, tlsConfig *tls.Config) (*auth, error) {
	cfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:           &apiserverconfig.AnonymousAuthConfig{Enabled: s.opts.Anonymous},
		CacheTTL:            s.opts.AuthenticationCacheTTL,
		WebhookRetryBackoff: &reviewBackoff,
	}
	var ca *dynamiccertificates.DynamicFileCAContent
	if s.opts.ClientCAFile != "" {
		var err error
		if ca, err = dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", s.opts.ClientCAFile); err != nil {
			return nil, fmt.Errorf("client CA file: %w", err)
		}
		cfg.ClientCertificateCAContentProvider = ca
		tlsConfig.ClientAuth = tls.RequestClientCert
	}
	if *s.opts.WebhookAuthentication {
		cfg.TokenAccessReviewClient = s.client.AuthenticationV1()
	}
	authn, _, err := cfg.New()
	if err != nil {
		return nil, fmt.Errorf("authentication: %w", err)
	}
	if ca != nil {
		certs := newCertCache(authn, s.opts.AuthenticationCacheTTL, s.opts.Clock)
		ca.AddListener(certs)
		go ca.Run(ctx, 1)
		authn = certs
	}

	var authz authorizer.Authorizer
	switch s.opts.AuthorizationMode {
	case AuthorizationModeAlwaysAllow:
		authz = authorizerfactory.NewAlwaysAllowAuthorizer()
	default:
		authz, err = authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: s.client.AuthorizationV1(),
			AllowCacheTTL:             s.opts.AuthorizedCacheTTL,
			DenyCacheTTL:              s.opts.UnauthorizedCacheTTL,
			WebhookRetryBackoff:       &reviewBackoff,
		}.New()
		if err != nil {
			return nil, fmt.Errorf("authorization: %w", err)
		}
	}

	a := &auth{authn: authn, authz: authz, nodeName: s.opts.NodeName}
	a.pods, _ = s.backend.(PodNodeResolver)
	a.addrs = s.opts.Addresses
	return a, nil
}

// filter lets through to next only the requests whose user may do what
// they ask: 401 without valid credentials, 403 when access is denied.
func (a *auth) filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		logger := klog.FromContext(ctx)
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil {
			logger.V(2).Info("Unable to authenticate a request", "path", r.URL.Path, "err", err)
		}
		if err != nil || !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if err := checkPath(r.URL); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}

		attrs := a.attributes(resp.User, r)
		subresources := make([]string, 0, len(attrs))
		for _, attr := range attrs {
			subresources = append(subresources, attr.Subresource)
			decision, _, err := a.authz.Authorize(ctx, attr)
			if err != nil {
				logger.Error(err, "Authorization error", "user", attr.User.GetName(), "verb", attr.Verb, "subresource", attr.Subresource)
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
					attr.User.GetName(), attr.Verb, attr.Resource, attr.Subresource), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		first := attrs[0]
		logger.V(2).Info("Forbidden", "user", first.User.GetName(), "verb", first.Verb, "node", first.Name, "subresources", subresources)
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)",
			first.User.GetName(), first.Verb, first.Resource, subresources), http.StatusForbidden)
	})
}

// checkPath refuses the paths that authorization and routing could read
// differently: authorization reads the decoded path, the ServeMux matches
// the escaped one segment by segment, so "/stats/..%2Fexec/…" would be
// authorized as nodes/stats and "/containerLogs/ns/pod/%2e%2e" would hand
// ".." to the backend as a container name. No name in a kubelet API path
// (namespace, pod, container, UID) can hold a slash or be a dot segment,
// so nothing the API server sends is refused.
func checkPath(u *url.URL) error {
	escaped := u.EscapedPath()
	segments := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	for i, seg := range segments {
		name, err := url.PathUnescape(seg)
		switch {
		case err != nil:
			return fmt.Errorf("invalid path %q: %w", escaped, err)
		case name == "." || name == "..":
			return fmt.Errorf("invalid path %q: dot segments are not allowed", escaped)
		case strings.Contains(name, "/"):
			return fmt.Errorf("invalid path %q: encoded slashes are not allowed", escaped)
		case name == "" && i < len(segments)-1:
			return fmt.Errorf("invalid path %q: empty segments are not allowed", escaped)
		}
	}
	return nil
}

// attributes maps a request to the access it needs, as the kubelet does:
// the HTTP method gives the verb, the path the subresource of nodes, and the
// node is the one the request is about (see nodeFor).
// Each returned alternative is enough on its own.
func (a *auth) attributes(u user.Info, r *http.Request) []authorizer.AttributesRecord {
	verb := ""
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}

	path := r.URL.Path
	var subresources []string
	// The fine-grained subresources come first; proxy still grants them.
	switch {
	case underPath(path, "/pods"), underPath(path, "/runningpods"):
		subresources = append(subresources, "pods")
	case underPath(path, "/healthz"):
		subresources = append(subresources, "healthz")
	case underPath(path, "/configz"):
		subresources = append(subresources, "configz")
	}
	switch {
	case underPath(path, "/stats"):
		subresources = append(subresources, "stats")
	case underPath(path, "/metrics"):
		subresources = append(subresources, "metrics")
	case underPath(path, "/logs"):
		subresources = append(subresources, "log")
	case underPath(path, "/checkpoint"):
		subresources = append(subresources, "checkpoint")
	case underPath(path, "/statusz"):
		subresources = append(subresources, "statusz")
	case underPath(path, "/flagz"):
		subresources = append(subresources, "configz")
	default:
		subresources = append(subresources, "proxy")
	}

	node := a.nodeFor(r)
	attrs := make([]authorizer.AttributesRecord, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, authorizer.AttributesRecord{
			User:            u,
			Verb:            verb,
			APIVersion:      "v1",
			Resource:        "nodes",
			Subresource:     sub,
			Name:            node,
			ResourceRequest: true,
			Path:            path,
		})
	}
	return attrs
}

// nodeFor returns the node a request is about: for /stats and /metrics,
// the node whose address it was sent to (as the handlers serve it); for
// paths naming a pod (/{endpoint}/{namespace}/{pod}/…), the node that pod
// is bound to; else the primary node.
func (a *auth) nodeFor(r *http.Request) string {
	path := r.URL.Path
	if servesAddressedNode(path) {
		return addressedNode(r, a.addrs, a.nodeName)
	}
	if a.pods == nil {
		return a.nodeName
	}
	if namespace, pod, ok := podInPath(path); ok {
		if node, ok := a.pods.NodeForPod(namespace, pod); ok {
			return node
		}
	}
	return a.nodeName
}

// podInPath returns the namespace and pod of the paths of the endpoints
// about one pod.
func podInPath(path string) (namespace, pod string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) < 3 || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	switch parts[0] {
	case "containerLogs", "exec", "attach", "portForward", "run", "checkpoint":
		return parts[1], parts[2], true
	}
	return "", "", false
}

// underPath tells whether p is root or below it.
func underPath(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}
