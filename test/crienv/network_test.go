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
