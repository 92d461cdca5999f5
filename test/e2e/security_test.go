package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/server"
)

// Security checks of the kubelet API and of the paths a pod spec reaches on
// the host: the authorization matrix of every endpoint the server
// registers, a node's identity kept to its own node, and volume subPaths
// and log paths that try to leave where they belong.

// kubeletClient sends requests to one agent's kubelet API.
type kubeletClient struct {
	base string // https://host:port
}

// do sends a request with a bearer token or a client certificate (either
// may be empty) and returns the status and the start of the body.
func (k kubeletClient) do(t *testing.T, method, path, token string, cert *tls.Certificate) (int, string) {
	t.Helper()
	tlsConfig := insecureTLS()
	if cert != nil {
		tlsConfig.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tlsConfig}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: 20 * time.Second, Transport: tr,
		// A redirect is an answer of its own, not to be followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(method, k.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// nodeAccess is a ServiceAccount of the test namespace bound to a
// ClusterRole with exactly these rules on nodes subresources, and its token.
type nodeAccess struct {
	user  string // system:serviceaccount:<ns>:<name>
	token string
}

// grantNodes creates ServiceAccount ns/name bound to a new ClusterRole whose
// only rule gives verbs on nodes/<sub> for each sub, waits until the API
// server's authorizer says so, and returns its token. The cluster-wide
// objects are deleted when the test ends.
func grantNodes(t *testing.T, ns, name string, verbs []string, subs ...string) nodeAccess {
	t.Helper()
	ctx := context.Background()
	kubectl(t, "create", "serviceaccount", "-n", ns, name)
	rbac := client.RbacV1()
	crName := ns + "-" + name
	resources := make([]string, 0, len(subs))
	for _, s := range subs {
		resources = append(resources, "nodes/"+s)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: crName},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: verbs}}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), crName, metav1.DeleteOptions{}) })
	user := "system:serviceaccount:" + ns + ":" + name
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: crName},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: crName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), crName, metav1.DeleteOptions{}) })
	// The agent caches a denial for 30 s: ask only once RBAC has the binding.
	if len(subs) > 0 {
		verb := verbs[0]
		if verb == "*" {
			verb = "get"
		}
		eventually(t, 30*time.Second, user+" granted nodes/"+subs[0], func() (bool, string) {
			out, err := kubectlErr("auth", "can-i", verb, "nodes", "--subresource", subs[0], "--as", user)
			return strings.TrimSpace(out) == "yes", fmt.Sprint(out, err)
		})
	}
	return nodeAccess{user: user, token: strings.TrimSpace(kubectl(t, "create", "token", "-n", ns, name, "--duration=1h"))}
}

// routePath is a concrete request path of a route: its wildcards filled
// with the test node's and pod's names, and short profiles.
func routePath(r server.Route, node, ns, pod, uid, container string) string {
	p := strings.NewReplacer("{node}", node, "{namespace}", ns, "{pod}", pod, "{uid}", uid, "{container}", container).Replace(r.Path)
	switch {
	case strings.HasPrefix(p, "/debug/pprof/"):
		p += "?seconds=1"
	case strings.HasPrefix(p, "/exec/"), strings.HasPrefix(p, "/run/"):
		p += "?command=true&cmd=true&output=1"
	}
	return p
}

// methodsOf are the methods a route is tried with.
func methodsOf(r server.Route) []string {
	if r.Method == "" {
		return []string{http.MethodGet, http.MethodPost}
	}
	return []string{r.Method}
}

// runningPod starts a pod with one container that logs a line and sleeps,
// and returns its UID once it runs.
func runningPod(t *testing.T, ns, node, name string) string {
	t.Helper()
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  nodeName: %s
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "echo log-of-%s; sleep 3600"]
`, name, node, name))
	waitPodPhase(t, ns, name, "Running", 60*time.Second)
	return string(getPod(t, ns, name).UID)
}

// TestKubeletAPIAuthorizationMatrix walks every endpoint the kubelet API
// server registers (server.Routes, the server's own route table) on a
// process node with real RBAC and real ServiceAccount tokens: without
// credentials 401; with a token whose ClusterRole grants every nodes
// subresource but the ones that authorize the endpoint 403; with one that
// grants exactly one of those, neither 401 nor 403. The verb counts too:
// nodes/proxy with only get refuses what is posted.
func TestKubeletAPIAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	uid := runningPod(t, ns, node, "app")
	k := kubeletClient{base: fmt.Sprintf("https://127.0.0.1:%d", a.port)}

	routes := server.Routes()
	all := map[string]bool{}
	for _, r := range routes {
		for _, s := range r.Subresources {
			all[s] = true
		}
	}
	// One ServiceAccount per subresource with only it, and one per set of
	// alternatives with everything else.
	only := map[string]nodeAccess{}
	without := map[string]nodeAccess{}
	every := []string{"*"}
	for s := range all {
		only[s] = grantNodes(t, ns, "only-"+s, every, s)
	}
	for _, r := range routes {
		key := strings.Join(r.Subresources, "-")
		if _, ok := without[key]; ok {
			continue
		}
		var rest []string
		for s := range all {
			if !slices.Contains(r.Subresources, s) {
				rest = append(rest, s)
			}
		}
		sort.Strings(rest)
		without[key] = grantNodes(t, ns, "without-"+key, every, rest...)
	}
	getProxy := grantNodes(t, ns, "get-proxy", []string{"get"}, "proxy")

	tried := 0
	for _, r := range routes {
		path := routePath(r, node, ns, "app", uid, "main")
		for _, method := range methodsOf(r) {
			tried++
			if status, body := k.do(t, method, path, "", nil); status != http.StatusUnauthorized {
				t.Errorf("anonymous %s %s = %d %q, want 401", method, path, status, body)
			}
			key := strings.Join(r.Subresources, "-")
			if status, body := k.do(t, method, path, without[key].token, nil); status != http.StatusForbidden {
				t.Errorf("%s %s with every nodes subresource but %v = %d %q, want 403", method, path, r.Subresources, status, body)
			}
			for _, s := range r.Subresources {
				status, body := k.do(t, method, path, only[s].token, nil)
				if status == http.StatusUnauthorized || status == http.StatusForbidden {
					t.Errorf("%s %s with nodes/%s = %d %q, want it authorized", method, path, s, status, body)
				}
			}
			if slices.Contains(r.Subresources, "proxy") {
				status, body := k.do(t, method, path, getProxy.token, nil)
				denied := status == http.StatusForbidden
				if wantDenied := method != http.MethodGet; denied != wantDenied {
					t.Errorf("%s %s with only get on nodes/proxy = %d %q, want forbidden: %v", method, path, status, body, wantDenied)
				}
			}
		}
	}
	t.Logf("%d routes, %d method and path pairs, each tried anonymously, without and with its subresources", len(routes), tried)

	// What the right subresource reaches is the endpoint itself.
	if status, body := k.do(t, http.MethodGet, "/containerLogs/"+ns+"/app/main", only["proxy"].token, nil); status != http.StatusOK || body != "log-of-app" {
		t.Errorf("logs with nodes/proxy = %d %q, want 200 log-of-app", status, body)
	}
	if status, body := k.do(t, http.MethodGet, "/pods", only["pods"].token, nil); status != http.StatusOK || !strings.Contains(body, `"PodList"`) {
		t.Errorf("/pods with nodes/pods = %d %q, want 200 and a PodList", status, body)
	}
}

// TestKubeletAPIPathEscapesRefused asks the kubelet API, with full nodes
// rights, for container logs under names and paths that try to leave the
// pod: every request is refused (400 or 404), none reads another file.
func TestKubeletAPIPathEscapesRefused(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	runningPod(t, ns, node, "app")
	runningPod(t, ns, node, "other")
	k := kubeletClient{base: fmt.Sprintf("https://127.0.0.1:%d", a.port)}
	admin := grantNodes(t, ns, "admin", []string{"*"}, "proxy", "log", "pods", "stats", "metrics", "healthz")

	if status, body := k.do(t, http.MethodGet, "/containerLogs/"+ns+"/app/main", admin.token, nil); status != http.StatusOK || body != "log-of-app" {
		t.Fatalf("the pod's own log = %d %q, want 200 log-of-app", status, body)
	}
	base := "/containerLogs/" + ns + "/app/"
	for _, path := range []string{
		base + "..",
		base + "%2e%2e",
		base + "%2E%2E",
		base + "..%2f..%2f..%2f..%2fetc%2fpasswd",
		base + "%2e%2e%2f%2e%2e%2fetc%2fhostname",
		base + "main%2f..%2f..%2fother%2fmain",
		base + "main/..",
		base + "../other/main",
		"/containerLogs/" + ns + "/%2e%2e/main",
		"/containerLogs/" + ns + "/app%2f..%2fother/main",
		"/containerLogs/%2e%2e/app/main",
		base + "main%00",
		base + "nosuch",
		base + ".",
		"/logs/..%2f..%2fetc%2fpasswd",
		"/logs/../../etc/passwd",
	} {
		status, body := k.do(t, http.MethodGet, path, admin.token, nil)
		if status != http.StatusBadRequest && status != http.StatusNotFound {
			t.Errorf("GET %s = %d %q, want 400 or 404", path, status, body)
		}
		if strings.Contains(body, "log-of-") || strings.Contains(body, "root:") {
			t.Errorf("GET %s read a log or a file: %q", path, body)
		}
	}
	// Through the API server, a container name with a slash never reaches
	// the node.
	if out, err := kubectlErr("logs", "-n", ns, "app", "-c", "../other"); err == nil || strings.Contains(out, "log-of-") {
		t.Errorf("kubectl logs -c ../other = %q %v, want refused", out, err)
	}
}

// TestNodeCredentialsConfinedToTheirNode runs two process nodes that join
// with their own identities (system:node:<name>). Node A's credentials
// cannot write node B's Node status, Lease or pods: NodeRestriction
// refuses them; and nodelet never needs to (neither agent is refused
// anything while both run pods). Node B's kubelet API refuses node A's
// client certificate (the Node authorizer grants no nodes/proxy), until
// RBAC grants it.
func TestNodeCredentialsConfinedToTheirNode(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(filepath.Join(filepath.Dir(kubeconfig), "bootstrap.kubeconfig")); err != nil {
		t.Skip("the cluster under test has no bootstrap kubeconfig: its nodes do not run as themselves")
	}
	nodeA, nodeB := uniqueName(t), uniqueName(t)
	a := startProcessNodelet(t, nodeA)
	b := startProcessNodelet(t, nodeB)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	runningPod(t, ns, nodeA, "on-a")
	runningPod(t, ns, nodeB, "on-b")

	asA := func(args ...string) (string, error) {
		return kubectlErr(append([]string{"--kubeconfig", filepath.Join(a.rootDir, "kubeconfig")}, args...)...)
	}
	if who, err := asA("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || who != "system:node:"+nodeA {
		t.Fatalf("node A's kubeconfig is %q (%v), want system:node:%s", who, err, nodeA)
	}
	for _, tc := range []struct {
		what string
		args []string
	}{
		{"patch node B's status", []string{"patch", "node", nodeB, "--subresource=status", "--type=merge",
			"-p", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Spoofed"}]}}`}},
		{"label node B", []string{"label", "node", nodeB, "e2e.nodelet.io/spoofed=true"}},
		{"renew node B's Lease", []string{"patch", "lease", "-n", "kube-node-lease", nodeB, "--type=merge",
			"-p", `{"spec":{"holderIdentity":"` + nodeA + `"}}`}},
		{"delete node B's Lease", []string{"delete", "lease", "-n", "kube-node-lease", nodeB}},
		{"patch the status of a pod bound to node B", []string{"patch", "pod", "-n", ns, "on-b", "--subresource=status", "--type=merge",
			"-p", `{"status":{"phase":"Failed","reason":"Spoofed"}}`}},
		{"delete a pod bound to node B", []string{"delete", "pod", "-n", ns, "on-b", "--wait=false"}},
		{"delete node B", []string{"delete", "node", nodeB, "--wait=false"}},
	} {
		out, err := asA(tc.args...)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
			t.Errorf("as node A, %s: %q %v, want forbidden", tc.what, out, err)
		}
	}
	if out := kubectl(t, "get", "pod", "-n", ns, "on-b", "-o", "jsonpath={.status.phase} {.metadata.deletionTimestamp}"); out != "Running " {
		t.Errorf("pod on-b after node A's attempts: %q, want Running and not deleted", out)
	}
	if out := kubectl(t, "get", "lease", "-n", "kube-node-lease", nodeB, "-o", "jsonpath={.spec.holderIdentity}"); out != nodeB {
		t.Errorf("node B's Lease is held by %q, want %s", out, nodeB)
	}

	// Node A's client certificate against node B's kubelet API.
	cert, err := tls.LoadX509KeyPair(filepath.Join(a.rootDir, "pki", "nodelet-client-current.pem"), filepath.Join(a.rootDir, "pki", "nodelet-client-current.pem"))
	if err != nil {
		t.Fatalf("node A's client certificate: %v", err)
	}
	kb := kubeletClient{base: fmt.Sprintf("https://127.0.0.1:%d", b.port)}
	logsOfB := "/containerLogs/" + ns + "/on-b/main"
	for _, path := range []string{logsOfB, "/exec/" + ns + "/on-b/main?command=true&output=1", "/pods", "/debug/pprof/cmdline"} {
		if status, body := kb.do(t, http.MethodGet, path, "", &cert); status != http.StatusForbidden || !strings.Contains(body, "system:node:"+nodeA) {
			t.Errorf("node A's certificate: GET %s on node B = %d %q, want 403 naming system:node:%s", path, status, body, nodeA)
		}
	}
	// RBAC can grant it, as to any user.
	crName := ns + "-node-a-proxy"
	rbac := client.RbacV1()
	ctx := context.Background()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: crName},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), crName, metav1.DeleteOptions{}) })
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: crName},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: crName},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:node:" + nodeA}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), crName, metav1.DeleteOptions{}) })
	// The agent remembers the denial for 30 s (unauthorizedCacheTTL).
	eventually(t, 60*time.Second, "node A's certificate reads node B's logs once RBAC grants nodes/proxy", func() (bool, string) {
		status, body := kb.do(t, http.MethodGet, logsOfB, "", &cert)
		return status == http.StatusOK && body == "log-of-on-b", fmt.Sprintf("%d %q", status, body)
	})

	// Neither agent was refused anything: each writes only its own objects.
	for _, ag := range []*processAgent{a, b} {
		if log := ag.logText(); strings.Contains(strings.ToLower(log), "forbidden") {
			t.Errorf("the agent of %s was refused something:\n%s", ag.node, grepLines(strings.ToLower(log), "forbidden"))
		}
	}
}

// TestProcessSubPathEscapesRefused runs, on a process node, containers whose
// volume subPath tries to leave the volume: by "..", by an absolute path
// (both refused by the API server when static, by the node when they come
// from subPathExpr), and through symbolic links an init container planted
// in the volume. Each such container waits with CreateContainerConfigError
// naming the volumeMount and its subPath, with a Warning event; it never
// starts, and nothing is created outside the volume. A link that stays in
// the volume works.
func TestProcessSubPathEscapesRefused(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Mount points of the containers: process containers see the host's
	// file system, where missing mount points are created.
	mnt := t.TempDir()

	// Static subPaths that leave the volume never reach the node.
	for sub, want := range map[string]string{"../..": "must not contain '..'", "/etc": "must be a relative path"} {
		_, err := kubectlErr("apply", "-n", ns, "-f", writeFile(t, "static.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: static
spec:
  nodeName: %s
  containers:
  - name: main
    image: nodelet.io/none
    command: ["true"]
    volumeMounts: [{name: work, mountPath: %s/static, subPath: %q}]
  volumes: [{name: work, emptyDir: {}}]
`, node, mnt, sub)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a pod with subPath %q: %v, want refused: %s", sub, err, want)
		}
	}

	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: escape
spec:
  nodeName: %[1]s
  initContainers:
  - name: plant
    image: nodelet.io/none
    command: ["sh", "-c", "cd %[3]s/plant && mkdir real && echo inside > real/file && ln -s %[2]s out && ln -s ../../../../../../../../.. up && ln -s real in"]
    volumeMounts: [{name: work, mountPath: %[3]s/plant}]
  containers:
  - name: inside
    image: nodelet.io/none
    command: ["sh", "-c", "cat %[3]s/inside/file; sleep 3600"]
    volumeMounts: [{name: work, mountPath: %[3]s/inside, subPath: in}]
  - name: link-out
    image: nodelet.io/none
    command: ["sh", "-c", "cat %[3]s/out/secret; sleep 3600"]
    volumeMounts: [{name: work, mountPath: %[3]s/out, subPath: out}]
  - name: link-out-deeper
    image: nodelet.io/none
    command: ["sh", "-c", "sleep 3600"]
    volumeMounts: [{name: work, mountPath: %[3]s/deeper, subPath: out/made-by-nodelet}]
  - name: link-up
    image: nodelet.io/none
    command: ["sh", "-c", "sleep 3600"]
    volumeMounts: [{name: work, mountPath: %[3]s/up, subPath: up/etc}]
  - name: expr-dotdot
    image: nodelet.io/none
    command: ["sh", "-c", "sleep 3600"]
    env: [{name: UP, value: "../.."}]
    volumeMounts: [{name: work, mountPath: %[3]s/dotdot, subPathExpr: "$(UP)/etc"}]
  - name: expr-absolute
    image: nodelet.io/none
    command: ["sh", "-c", "sleep 3600"]
    env: [{name: ABS, value: "/etc"}]
    volumeMounts: [{name: work, mountPath: %[3]s/absolute, subPathExpr: "$(ABS)"}]
  volumes: [{name: work, emptyDir: {}}]
`, node, outside, mnt))

	want := map[string]string{
		"link-out":        `volumeMount "work" at ` + mnt + `/out: subPath "out" escapes the volume through a symbolic link`,
		"link-out-deeper": `subPath "out/made-by-nodelet" escapes the volume through a symbolic link`,
		"link-up":         `subPath "up/etc" escapes the volume through a symbolic link`,
		"expr-dotdot":     `subPath "../../etc" contains '..'`,
		"expr-absolute":   `subPath "/etc" is absolute`,
	}
	statuses := func() map[string]corev1.ContainerStatus {
		byName := map[string]corev1.ContainerStatus{}
		for _, cs := range getPod(t, ns, "escape").Status.ContainerStatuses {
			byName[cs.Name] = cs
		}
		return byName
	}
	eventually(t, 60*time.Second, "every escaping container waits with CreateContainerConfigError naming its subPath", func() (bool, string) {
		byName := statuses()
		for name, msg := range want {
			w := byName[name].State.Waiting
			if w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, msg) {
				return false, fmt.Sprintf("%s: %+v", name, byName[name].State)
			}
		}
		return true, ""
	})
	eventually(t, 30*time.Second, "the container whose link stays in the volume reads it", func() (bool, string) {
		out, err := kubectlErr("logs", "-n", ns, "escape", "-c", "inside")
		return err == nil && out == "inside\n", fmt.Sprint(out, err)
	})
	events := podEvents(t, ns, "escape")
	for name, msg := range want {
		if !strings.Contains(events, msg) {
			t.Errorf("no Warning event for container %s naming %s; events:\n%s", name, msg, events)
		}
		cs := statuses()[name]
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil || cs.RestartCount != 0 {
			t.Errorf("container %s started: %+v", name, cs)
		}
		if out, err := kubectlErr("logs", "-n", ns, "escape", "-c", name); strings.Contains(out, "outside-secret") {
			t.Errorf("container %s read the file outside its volume: %q %v", name, out, err)
		}
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the directory the links point to holds %v, want only the secret: nothing is created outside the volume", names)
	}
	if where := mountedAnywhere(filepath.Join(filepath.Base(filepath.Dir(outside)), filepath.Base(outside))); len(where) > 0 {
		t.Errorf("%s is mounted: %v", outside, where)
	}
}

// mountedAnywhere lists the mounts, in the mount namespace of any process,
// whose source or mount point names path.
func mountedAnywhere(path string) []string {
	files, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, path) && !seen[line] {
				seen[line] = true
				out = append(out, filepath.Base(filepath.Dir(f))+": "+line)
			}
		}
	}
	return out
}

// TestProcessLogSymlinkRefused runs, on a process node, containers that
// replace their own log file, or the directory of their logs, with a
// symbolic link to a file or directory elsewhere on the host (as any
// container that can write to its log directory could): kubectl logs
// refuses to read through the link, and never shows the other file.
func TestProcessLogSymlinkRefused(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	// Written as a CRI log, so that a reader that follows the link would
	// show it as a log line.
	if err := os.WriteFile(secret, []byte("2025-01-01T00:00:00Z stdout F outside-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "0.log"), []byte("2025-01-01T00:00:00Z stdout F outside-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(a.rootDir, "pods", "$(UID)", "logs")
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: liar
spec:
  nodeName: %[1]s
  containers:
  - name: file
    image: nodelet.io/none
    command: ["sh", "-c", "echo before; ln -sf %[2]s %[3]s/file/0.log; echo planted; sleep 3600"]
    env: [{name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}]
  - name: dir
    image: nodelet.io/none
    command: ["sh", "-c", "echo before; mv %[3]s/dir %[3]s/dir.moved && ln -s %[4]s %[3]s/dir; echo planted; sleep 3600"]
    env: [{name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}]
`, node, secret, logs, outside))
	waitPodPhase(t, ns, "liar", "Running", 60*time.Second)
	uid := string(getPod(t, ns, "liar").UID)
	for _, c := range []string{"file", "dir"} {
		link := filepath.Join(a.rootDir, "pods", uid, "logs", c)
		if c == "file" {
			link = filepath.Join(link, "0.log")
		}
		eventually(t, 30*time.Second, "container "+c+" planted its link", func() (bool, string) {
			fi, err := os.Lstat(link)
			return err == nil && fi.Mode()&os.ModeSymlink != 0, fmt.Sprint(err)
		})
		out, err := kubectlErr("logs", "-n", ns, "liar", "-c", c)
		if strings.Contains(out, "outside-secret") {
			t.Errorf("kubectl logs -c %s read through the link: %q", c, out)
		}
		if err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("kubectl logs -c %s: %q %v, want an error saying the log is behind a symbolic link", c, out, err)
		}
	}
}
