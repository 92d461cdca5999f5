//go:build linux

package crienv

import (
	"reflect"
	"testing"
)

func TestOwnRules(t *testing.T) {
	listing := `-P PREROUTING ACCEPT
-N CNI-DN-1f2e3d
-N CNI-HOSTPORT-DNAT
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"nodelet-crienv-3\" id: \"abc\"" -m multiport --dports 8080 -j CNI-DN-1f2e3d
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"nodelet-crienv-30\" id: \"def\"" -m multiport --dports 8081 -j CNI-DN-4a5b6c
-A POSTROUTING -s 10.213.3.2/32 -m comment --comment "name: \"nodelet-crienv-3\" id: \"abc\"" -j CNI-77aa
-A CNI-DN-1f2e3d -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.213.3.2:80
`
	rules, chains := ownRules(listing, "nodelet-crienv-3")
	wantRules := [][]string{
		{"CNI-HOSTPORT-DNAT", "-p", "tcp", "-m", "comment", "--comment", `dnat name: "nodelet-crienv-3" id: "abc"`, "-m", "multiport", "--dports", "8080", "-j", "CNI-DN-1f2e3d"},
		{"POSTROUTING", "-s", "10.213.3.2/32", "-m", "comment", "--comment", `name: "nodelet-crienv-3" id: "abc"`, "-j", "CNI-77aa"},
	}
	if !reflect.DeepEqual(rules, wantRules) {
		t.Errorf("rules:\n got %q\nwant %q", rules, wantRules)
	}
	if want := []string{"CNI-DN-1f2e3d", "CNI-77aa"}; !reflect.DeepEqual(chains, want) {
		t.Errorf("chains: got %q, want %q", chains, want)
	}
}

func TestTomlString(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/nlcri-1/c.sock`: `"/tmp/nlcri-1/c.sock"`,
		`a"b\c`:               `"a\"b\\c"`,
		"tab\there":           `"tab\u0009here"`,
	} {
		if got := tomlString(in); got != want {
			t.Errorf("tomlString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestPortmapJumps(t *testing.T) {
	listing := `-P PREROUTING ACCEPT
-N CNI-HOSTPORT-DNAT
-N CNI-HOSTPORT-MASQ
-N CNI-HOSTPORT-SETMARK
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000
`
	rules, inUse := portmapJumps(listing)
	want := [][]string{
		{"PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT"},
		{"OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT"},
		{"POSTROUTING", "-m", "comment", "--comment", "CNI portfwd requiring masquerade", "-j", "CNI-HOSTPORT-MASQ"},
	}
	if inUse || !reflect.DeepEqual(rules, want) {
		t.Errorf("got %q in use %v, want %q not in use", rules, inUse, want)
	}
	_, inUse = portmapJumps(listing + `-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"other\" id: \"abc\"" -j CNI-DN-1` + "\n")
	if !inUse {
		t.Errorf("a host port's rule in CNI-HOSTPORT-DNAT does not count as in use")
	}
}
