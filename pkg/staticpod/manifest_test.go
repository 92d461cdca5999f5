package staticpod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
`

// The same pod as podYAML, in JSON with its keys in another order.
const podJSON = `{"spec": {"containers": [{"command": ["sleep", "3600"], "image": "busybox", "name": "main"}]},
 "metadata": {"labels": {"app": "web"}, "name": "web"}, "kind": "Pod", "apiVersion": "v1"}`

func mustPrepare(t *testing.T, data, source, origin, node string) *corev1.Pod {
	t.Helper()
	pods, err := decodePods([]byte(data), source == SourceHTTP)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if err := prepare(pods[0], source, origin, node); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	return pods[0]
}

func TestDecodePods(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		list    bool
		pods    int
		wantErr string
	}{
		{"yaml pod", podYAML, false, 1, ""},
		{"json pod", podJSON, false, 1, ""},
		{"empty", " \n", false, 0, "empty manifest"},
		{"not yaml", "a: [b", false, 0, "decode manifest"},
		{"another kind", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", false, 0, `kind "Service"`},
		{"no kind", "metadata: {name: s}\n", false, 0, `want a v1 Pod`},
		{"unknown field", strings.Replace(podYAML, "    image:", "    imagee: x\n    image:", 1), false, 0, `unknown field "spec.containers[0].imagee"`},
		{"list from a file", "apiVersion: v1\nkind: PodList\nitems: []\n", false, 0, "want a v1 Pod,"},
		{"list from a URL", "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n", true, 2, ""},
		{"list of other kinds", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service}\n", true, 0, "item 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, err := decodePods([]byte(tt.data), tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pods) != tt.pods {
				t.Errorf("%d pods, want %d", len(pods), tt.pods)
			}
		})
	}
}

func TestPrepare(t *testing.T) {
	pod := mustPrepare(t, podYAML, SourceFile, "/etc/manifests/web.yaml", "node1")
	if pod.Name != "web-node1" || pod.Namespace != "default" || pod.Spec.NodeName != "node1" {
		t.Errorf("pod %s/%s on %q, want default/web-node1 on node1", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	hash := pod.Annotations[podrules.ConfigHashAnnotation]
	if len(hash) != 32 || string(pod.UID) != hash {
		t.Errorf("uid %q, hash %q: want the same 32 hex digits", pod.UID, hash)
	}
	if pod.Annotations[podrules.ConfigSourceAnnotation] != SourceFile || !podrules.IsStaticPod(pod) || podrules.IsMirrorPod(pod) {
		t.Errorf("annotations %v: want a static pod from file", pod.Annotations)
	}
	s := pod.Spec
	if s.RestartPolicy != corev1.RestartPolicyAlways || s.DNSPolicy != corev1.DNSClusterFirst || *s.TerminationGracePeriodSeconds != 30 ||
		!*s.EnableServiceLinks || s.SchedulerName != "default-scheduler" {
		t.Errorf("spec defaults not applied: %+v", s)
	}
	c := s.Containers[0]
	if c.ImagePullPolicy != corev1.PullAlways || c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("container defaults not applied: %+v", c)
	}
	if n := len(s.Tolerations); n != 1 || s.Tolerations[0].Operator != corev1.TolerationOpExists || s.Tolerations[0].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("tolerations %v, want every NoExecute taint tolerated", s.Tolerations)
	}
	if pod.Status.Phase != corev1.PodPending {
		t.Errorf("phase %q, want Pending", pod.Status.Phase)
	}

	ns := mustPrepare(t, strings.Replace(podYAML, "  name: web\n", "  name: web\n  namespace: kube-system\n", 1), SourceFile, "/m/web.yaml", "node1")
	if ns.Namespace != "kube-system" {
		t.Errorf("namespace %q, want the manifest's", ns.Namespace)
	}
}

// The UID is the same for the same manifest, however it is written, and
// differs with the content, the file or URL, and the node.
func TestUIDStability(t *testing.T) {
	base := mustPrepare(t, podYAML, SourceFile, "/m/web.yaml", "node1").UID
	tests := []struct {
		name                 string
		data, source, origin string
		node                 string
		same                 bool
	}{
		{"same manifest again", podYAML, SourceFile, "/m/web.yaml", "node1", true},
		{"as JSON, keys in another order", podJSON, SourceFile, "/m/web.yaml", "node1", true},
		{"defaults spelled out", strings.Replace(podYAML, "spec:\n", "spec:\n  restartPolicy: Always\n", 1), SourceFile, "/m/web.yaml", "node1", true},
		{"another command", strings.Replace(podYAML, "3600", "3601", 1), SourceFile, "/m/web.yaml", "node1", false},
		{"another label", strings.Replace(podYAML, "app: web", "app: web2", 1), SourceFile, "/m/web.yaml", "node1", false},
		{"another file", podYAML, SourceFile, "/m/web2.yaml", "node1", false},
		{"from a URL", podYAML, SourceHTTP, "/m/web.yaml", "node1", false},
		{"another node", podYAML, SourceFile, "/m/web.yaml", "node2", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid := mustPrepare(t, tt.data, tt.source, tt.origin, tt.node).UID
			if (uid == base) != tt.same {
				t.Errorf("uid %s, base %s: same = %v, want %v", uid, base, uid == base, tt.same)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", 250)
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{"no name", strings.Replace(podYAML, "  name: web\n", "", 1), "metadata.name is required"},
		{"name too long with the node's", strings.Replace(podYAML, "name: web", "name: "+long, 1), "metadata.name"},
		{"bad namespace", strings.Replace(podYAML, "  name: web\n", "  name: web\n  namespace: Bad_NS\n", 1), "metadata.namespace"},
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: []}\n", "at least one container"},
		{"duplicate container", strings.Replace(podYAML, "  containers:\n", "  initContainers:\n  - {name: main, image: x}\n  containers:\n", 1), `spec.containers[0].name "main" is used by another container`},
		{"bad container name", strings.Replace(podYAML, "name: main", "name: Main", 1), `spec.containers[0].name "Main"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, err := decodePods([]byte(tt.data), false)
			if err != nil {
				t.Fatal(err)
			}
			err = prepare(pods[0], SourceFile, "/m/x.yaml", "node1")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"busybox":                         corev1.PullAlways,
		"busybox:latest":                  corev1.PullAlways,
		"busybox:1.36":                    corev1.PullIfNotPresent,
		"localhost:5000/busybox":          corev1.PullAlways,
		"localhost:5000/busybox:1":        corev1.PullIfNotPresent,
		"busybox@sha256:0123456789abcdef": corev1.PullIfNotPresent,
	} {
		if got := defaultPullPolicy(image); got != want {
			t.Errorf("defaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}
