package staticpod

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a-web.yaml"), podYAML)
	writeFile(t, filepath.Join(dir, "b-bad.yaml"), "apiVersion: v1\nkind: Pod\nspec: [\n")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), podYAML)
	writeFile(t, filepath.Join(dir, "c-db.json"), strings.Replace(podJSON, `"name": "web"`, `"name": "db"`, 1))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := readDir(dir, "n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d manifests, want 3 (hidden file and directory skipped): %+v", len(got), got)
	}
	if got[0].pod == nil || got[0].pod.Name != "web-n" || got[2].pod == nil || got[2].pod.Name != "db-n" {
		t.Errorf("manifests %+v, want web-n and db-n", got)
	}
	if got[1].err == nil || got[1].origin != filepath.Join(dir, "b-bad.yaml") {
		t.Errorf("bad manifest %+v, want an error for its file", got[1])
	}

	if got, err := readDir(filepath.Join(dir, "missing"), "n"); err != nil || len(got) != 0 {
		t.Errorf("missing directory: %v, %v; want no pods and no error", got, err)
	}
}

func TestMerge(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "1.yaml"), podYAML)
	writeFile(t, filepath.Join(dir, "2.yaml"), strings.Replace(podYAML, "3600", "1", 1)) // the same name
	writeFile(t, filepath.Join(dir, "3.yaml"), "junk")
	files, err := readDir(dir, "n")
	if err != nil {
		t.Fatal(err)
	}
	pods, bad := merge(files)
	if len(pods) != 1 || pods["default/web-n"].origin != filepath.Join(dir, "1.yaml") {
		t.Errorf("pods %v, want default/web-n of 1.yaml", pods)
	}
	if err := bad[filepath.Join(dir, "2.yaml")]; err == nil || !strings.Contains(err.Error(), "already defined by "+filepath.Join(dir, "1.yaml")) {
		t.Errorf("duplicate: %v, want an error naming the first file", err)
	}
	if bad[filepath.Join(dir, "3.yaml")] == nil {
		t.Errorf("junk manifest: no error")
	}
}

func TestFetchURL(t *testing.T) {
	list := "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: x}]}\n- metadata: {name: b}\n"
	tests := []struct {
		name    string
		status  int
		body    string
		pods    int
		bad     int
		wantErr string
	}{
		{"one pod", 200, podYAML, 1, 0, ""},
		{"a list, one of it bad", 200, list, 1, 1, ""},
		{"empty", 200, "", 0, 0, ""},
		{"not found", 404, "", 0, 0, "404"},
		{"not a pod", 200, "apiVersion: v1\nkind: Node\n", 0, 0, "want a v1 Pod or PodList"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			got, err := fetchURL(context.Background(), srv.Client(), srv.URL, "n")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pods, bad := merge(got)
			if len(pods) != tt.pods || len(bad) != tt.bad {
				t.Errorf("%d pods and %d bad, want %d and %d: %v", len(pods), len(bad), tt.pods, tt.bad, bad)
			}
		})
	}
}

func TestKeepLastGood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	writeFile(t, path, podYAML)
	before, err := readDir(dir, "n")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		content string // "" removes the file
		keptUID bool
		wantErr string
	}{
		{"caught half written", "apiVersion: v1\nkind: Pod\nmetadata: {na", true, "keeps running"},
		{"edited into an invalid pod", strings.Replace(podYAML, "name: main", "name: Main", 1), true, "keeps running"},
		{"edited into a valid pod", strings.Replace(podYAML, "3600", "1", 1), false, ""},
		{"removed", "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = os.Remove(path)
			if tt.content != "" {
				writeFile(t, path, tt.content)
			}
			read, err := readDir(dir, "n")
			if err != nil {
				t.Fatal(err)
			}
			pods, bad := merge(keepLastGood(before, read))
			got, ok := pods["default/web-n"]
			if kept := ok && got.pod.UID == before[0].pod.UID; kept != tt.keptUID {
				t.Errorf("previous pod kept = %v, want %v", kept, tt.keptUID)
			}
			if tt.content != "" && !tt.keptUID && !ok {
				t.Errorf("the new valid pod is not run")
			}
			if err := bad[path]; tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) || tt.wantErr == "" && err != nil {
				t.Errorf("problem %v, want %q", err, tt.wantErr)
			}
		})
	}
}
