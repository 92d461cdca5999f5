package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// simNodeFacts is what cluster tooling reads of a node: its pod range,
// provider ID, InternalIP and topology labels, as kubectl prints them.
type simNodeFacts struct {
	podCIDR, podCIDRs, providerID, address, zone, region, instanceType string
}

// simNodeFactsOf reads the facts of the fleet's nodes with kubectl's
// jsonpath, by node name.
func simNodeFactsOf(fleet string) (map[string]simNodeFacts, error) {
	out, err := kubectlErr("get", "nodes", "-l", "e2e/fleet="+fleet, "-o", `jsonpath={range .items[*]}`+
		`{.metadata.name}{"|"}{.spec.podCIDR}{"|"}{.spec.podCIDRs}{"|"}{.spec.providerID}{"|"}`+
		`{.status.addresses[?(@.type=="InternalIP")].address}{"|"}{.metadata.labels.topology\.kubernetes\.io/zone}{"|"}`+
		`{.metadata.labels.topology\.kubernetes\.io/region}{"|"}{.metadata.labels.node\.kubernetes\.io/instance-type}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	facts := map[string]simNodeFacts{}
	for line := range strings.Lines(strings.TrimSpace(out)) {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 8 {
			return nil, fmt.Errorf("kubectl printed %q", line)
		}
		facts[f[0]] = simNodeFacts{podCIDR: f[1], podCIDRs: f[2], providerID: f[3], address: f[4], zone: f[5], region: f[6], instanceType: f[7]}
	}
	return facts, nil
}

// Sim nodes look real to cluster tooling: each has its own pod range,
// provider ID, InternalIP and zone, and the scheduler spreads a Deployment
// over their zones. Two of the nodes exist before the agent starts: one
// bare, which gets our pod range and provider ID, and one with its own,
// which it keeps, across an agent restart too, without failing to register.
func TestSimNodesLookReal(t *testing.T) {
	t.Parallel()
	const nodes, replicas = 6, 6
	zones := []string{"zone-a", "zone-b", "zone-c"}
	fleet := uniqueName(t)
	cleanupFleet(t, fleet, nodes) // after the agent stopped: cleanups run last-in first-out

	bare, preset := fleet+"-0", fleet+"-1"
	const presetCIDR, presetID = "10.200.1.0/24", "e2e://preset"
	ctx := context.Background()
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: bare, Labels: map[string]string{"e2e/fleet": fleet}}},
		{ObjectMeta: metav1.ObjectMeta{Name: preset, Labels: map[string]string{"e2e/fleet": fleet}},
			Spec: corev1.NodeSpec{PodCIDR: presetCIDR, PodCIDRs: []string{presetCIDR}, ProviderID: presetID}},
	} {
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	config := writeFile(t, "config.yaml", `apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
sim:
  podCIDR: 10.123.0.0/16
  nodeAddresses: 127.91.0.0/29
  zones: [zone-a, zone-b, zone-c]
  region: e2e-region
`)
	a := startNodelet(t, fleet, "--config", config, "--nodes", strconv.Itoa(nodes), "--node-labels", "e2e/fleet="+fleet)
	ns := newNamespace(t)

	want := map[string]simNodeFacts{}
	for i := range nodes {
		name := fleet + "-" + strconv.Itoa(i)
		cidr := fmt.Sprintf("10.123.%d.0/24", i)
		f := simNodeFacts{podCIDR: cidr, podCIDRs: `["` + cidr + `"]`, providerID: "nodelet://" + name,
			address: fmt.Sprintf("127.91.0.%d", i+1), zone: zones[i%len(zones)], region: "e2e-region", instanceType: "nodelet-sim"}
		if name == preset {
			f.podCIDR, f.podCIDRs, f.providerID = presetCIDR, `["`+presetCIDR+`"]`, presetID
		}
		want[name] = f
	}
	checkFacts := func() {
		t.Helper()
		eventually(t, 60*time.Second, "every node Ready and described", func() (bool, string) {
			total, ready := fleetNodes(t, fleet)
			if ready != nodes {
				return false, fmt.Sprintf("%d of %d nodes, %d Ready", total, nodes, ready)
			}
			got, err := simNodeFactsOf(fleet)
			if err != nil {
				return false, err.Error()
			}
			for name, w := range want {
				if got[name] != w {
					return false, fmt.Sprintf("node %s: %+v, want %+v", name, got[name], w)
				}
			}
			return true, ""
		})
	}
	checkFacts()

	// A restart adopts every node again; the pod ranges and provider IDs
	// they have, ours or not, are left as they are.
	a.stop()
	a.start()
	a.waitRegistered(60 * time.Second)
	if !strings.Contains(a.logText(), `"Existing node keeps its pod ranges, which cannot change"`) {
		t.Errorf("the restarted agent did not say that %s keeps its pod range", preset)
	}
	checkFacts()

	apply(t, ns, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: spread
spec:
  replicas: %d
  selector:
    matchLabels: {app: spread}
  template:
    metadata:
      labels: {app: spread}
    spec:
      nodeSelector:
        e2e/fleet: %s
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: spread}
      containers:
      - name: app
        image: nodelet.io/sample:1
`, replicas, fleet))
	if _, err := kubectlErr("rollout", "status", "-n", ns, "deployment/spread", "--timeout=120s"); err != nil {
		t.Fatalf("rollout: %v\npods: %s", err, podSummary(t, ns))
	}
	perZone := map[string]int{}
	for _, p := range podList(t, ns).Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		w, ok := want[p.Spec.NodeName]
		if !ok {
			t.Errorf("pod %s on %q, not a node of the fleet", p.Name, p.Spec.NodeName)
			continue
		}
		perZone[w.zone]++
		// The pod's IP is from the range the node was given, unless the
		// node kept one of its own.
		if p.Spec.NodeName != preset {
			ip, err := netip.ParseAddr(p.Status.PodIP)
			if err != nil || !netip.MustParsePrefix(w.podCIDR).Contains(ip) {
				t.Errorf("pod %s on %s has IP %q, outside the node's %s", p.Name, p.Spec.NodeName, p.Status.PodIP, w.podCIDR)
			}
		}
	}
	for _, z := range zones {
		if perZone[z] != replicas/len(zones) {
			t.Errorf("pods per zone %v, want %d in each of %v", perZone, replicas/len(zones), zones)
			break
		}
	}
}
