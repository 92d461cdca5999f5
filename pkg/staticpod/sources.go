package staticpod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// maxManifestBytes bounds what one manifest file or URL may hold.
const maxManifestBytes = 10 << 20

// readDir reads the static pods of a manifest directory: every regular
// file (or link to one) whose name does not begin with ".", one pod per
// file, in the order of their names. A file that cannot be read or run is
// a manifest with its error; it never hides the others. A directory that
// does not exist holds no pods.
func readDir(dir, nodeName string) ([]manifest, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest directory: %w", err)
	}
	var out []manifest
	for _, e := range entries { // sorted by name
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if err != nil {
			out = append(out, manifest{origin: path, err: err})
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, readFile(path, nodeName))
	}
	return out, nil
}

// readFile reads one manifest file.
func readFile(path, nodeName string) manifest {
	m := manifest{origin: path}
	data, err := readLimited(path)
	if err != nil {
		m.err = err
		return m
	}
	pods, err := decodePods(data, false)
	if err != nil {
		m.err = err
		return m
	}
	if m.err = prepare(pods[0], SourceFile, path, nodeName); m.err == nil {
		m.pod = pods[0]
	}
	return m
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxManifestBytes)
	}
	return data, nil
}

// fetchURL reads the static pods served at url: one Pod, or a list of
// them. An error for the whole answer (unreachable, not 200, not a pod)
// is returned as such; the caller keeps the pods it had. An empty body is
// an empty set of pods. A pod of a list that cannot be run is a manifest
// with its error, named by its index.
func fetchURL(ctx context.Context, client *http.Client, url, nodeName string) ([]manifest, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("GET %s: larger than %d bytes", url, maxManifestBytes)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil
	}
	pods, err := decodePods(data, true)
	if err != nil {
		return nil, err
	}
	out := make([]manifest, 0, len(pods))
	for i, pod := range pods {
		m := manifest{origin: url}
		if len(pods) > 1 {
			m.origin = fmt.Sprintf("%s (item %d)", url, i)
		}
		// The UID derives from the URL and the content: two pods of one
		// list differ by their content.
		if m.err = prepare(pod, SourceHTTP, url, nodeName); m.err == nil {
			m.pod = pod
		}
		out = append(out, m)
	}
	return out, nil
}

// merge returns the static pods to run from the manifests of every source,
// by namespace/name, and the manifests' problems, by origin. The first
// manifest of a name wins; a later one of the same name is a problem
// naming both. A manifest may have both a pod and a problem: the pod it
// gave before it went bad (see keepLastGood).
func merge(sources ...[]manifest) (map[string]manifest, map[string]error) {
	pods := map[string]manifest{}
	bad := map[string]error{}
	for _, list := range sources {
		for _, m := range list {
			if m.err != nil {
				bad[m.origin] = m.err
			}
			if m.pod == nil {
				continue
			}
			key := m.pod.Namespace + "/" + m.pod.Name
			if first, ok := pods[key]; ok {
				bad[m.origin] = fmt.Errorf("pod %s is already defined by %s; ignored", key, first.origin)
				continue
			}
			pods[key] = m
		}
	}
	return pods, bad
}

// keepLastGood gives each manifest of read that cannot be run the pod the
// same origin gave in before, if any: a manifest caught half written, or
// edited into something invalid, leaves its running pod alone (reported
// until fixed). A manifest that is gone takes its pod with it.
func keepLastGood(before, read []manifest) []manifest {
	last := map[string]*corev1.Pod{}
	for _, m := range before {
		if m.pod != nil {
			last[m.origin] = m.pod
		}
	}
	for i := range read {
		if m := &read[i]; m.err != nil && m.pod == nil && last[m.origin] != nil {
			m.pod = last[m.origin]
			m.err = fmt.Errorf("%w; the pod it gave before keeps running", m.err)
		}
	}
	return read
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
