package cri

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func dockerConfigJSONSecret(name, auths string) corev1.Secret {
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":` + auths + `}`)},
	}
}

func dockercfgSecret(name, cfg string) corev1.Secret {
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Type:       corev1.SecretTypeDockercfg,
		Data:       map[string][]byte{corev1.DockerConfigKey: []byte(cfg)},
	}
}

func user(name string) *runtimeapi.AuthConfig {
	return &runtimeapi.AuthConfig{Username: name, Password: name + "-pw"}
}

func TestKeyringLookup(t *testing.T) {
	entry := func(name string) string { return `{"username":"` + name + `","password":"` + name + `-pw"}` }
	k, err := keyringFromSecrets([]corev1.Secret{
		dockerConfigJSONSecret("a", `{
			"https://index.docker.io/v1/": `+entry("hub")+`,
			"registry.example.com": `+entry("reg")+`,
			"registry.example.com/team": `+entry("team")+`,
			"*.wild.example": `+entry("wild")+`,
			"localhost:5000": `+entry("local")+`,
			"quay.io/org/": `+entry("quay-org")+`
		}`),
		dockercfgSecret("b", `{"http://insecure.example/v2/": `+entry("insecure")+`, "registry.example.com": `+entry("reg2")+`}`),
		{ObjectMeta: metav1.ObjectMeta{Name: "opaque"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("{")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, Type: corev1.SecretTypeDockerConfigJson},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		image string
		want  []*runtimeapi.AuthConfig
	}{
		{"busybox", []*runtimeapi.AuthConfig{user("hub")}},
		{"docker.io/user/app:1", []*runtimeapi.AuthConfig{user("hub")}},
		{"index.docker.io/user/app", []*runtimeapi.AuthConfig{user("hub")}},
		{"registry.example.com/team/app:1", []*runtimeapi.AuthConfig{user("team"), user("reg"), user("reg2")}},
		{"registry.example.com/team", []*runtimeapi.AuthConfig{user("team"), user("reg"), user("reg2")}},
		{"registry.example.com/teamx/app", []*runtimeapi.AuthConfig{user("reg"), user("reg2")}},
		{"registry.example.com:443/app", nil},
		{"a.wild.example/x", []*runtimeapi.AuthConfig{user("wild")}},
		{"a.b.wild.example/x", nil},
		{"wild.example/x", nil},
		{"localhost:5000/app", []*runtimeapi.AuthConfig{user("local")}},
		{"localhost/app", nil},
		{"quay.io/org/app@" + dgst, []*runtimeapi.AuthConfig{user("quay-org")}},
		{"quay.io/other/app", nil},
		{"insecure.example/x", []*runtimeapi.AuthConfig{user("insecure")}},
		{"bad image", nil},
	}
	for _, tt := range tests {
		got := k.lookup(tt.image)
		if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("lookup(%q) (-want +got):\n%s", tt.image, diff)
		}
	}
}

func TestKeyringAuthField(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	raw := func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name  string
		entry string
		want  *runtimeapi.AuthConfig
		err   string
	}{
		{"padded", `{"auth":"` + enc("user:pass:word") + `"}`, &runtimeapi.AuthConfig{Username: "user", Password: "pass:word"}, ""},
		{"unpadded", `{"auth":"` + raw("u:pw") + `"}`, &runtimeapi.AuthConfig{Username: "u", Password: "pw"}, ""},
		{"auth wins", `{"username":"x","password":"y","auth":"` + enc("u:p") + `"}`, &runtimeapi.AuthConfig{Username: "u", Password: "p"}, ""},
		{"tokens", `{"identitytoken":"id","registrytoken":"rt"}`, &runtimeapi.AuthConfig{IdentityToken: "id", RegistryToken: "rt"}, ""},
		{"not base64", `{"auth":"!!!"}`, nil, "image pull secret shop/s: key .dockerconfigjson: registry r.example: auth:"},
		{"no colon", `{"auth":"` + enc("nocolon") + `"}`, nil, "must be base64(username:password)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := keyringFromSecrets([]corev1.Secret{dockerConfigJSONSecret("s", `{"r.example":`+tt.entry+`}`)})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]*runtimeapi.AuthConfig{tt.want}, k.lookup("r.example/app"), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeyringErrors(t *testing.T) {
	tests := []struct {
		name   string
		secret corev1.Secret
		err    string
	}{
		{"bad json", dockerConfigJSONSecret("s", `[`), "image pull secret shop/s: key .dockerconfigjson:"},
		{"bad dockercfg", dockercfgSecret("old", `{"r": 1}`), "image pull secret shop/old: key .dockercfg:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := keyringFromSecrets([]corev1.Secret{tt.secret})
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

func TestRegistryLocation(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"registry.example.com", "registry.example.com", true},
		{"https://registry.example.com/v2/", "registry.example.com", true},
		{"https://index.docker.io/v1/", "docker.io", true},
		{"docker.io", "docker.io", true},
		{"http://r.example:5000/v1/team/", "r.example:5000/team", true},
		{"*.example.com", "*.example.com", true},
		{"https://", "", false},
		{"https://bad host/", "", false},
	}
	for _, tt := range tests {
		got, ok := registryLocation(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("registryLocation(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestEmptyKeyring(t *testing.T) {
	k, err := keyringFromSecrets(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.lookup("busybox"); got != nil {
		t.Errorf("lookup in an empty keyring = %v", got)
	}
}
