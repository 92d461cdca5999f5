package env

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/nofollow"
)

// fileKey resolves a fileKeyRef as the kubelet does: the key's value in
// the env file at ref.Path of the pod's emptyDir volume ref.VolumeName,
// opened without following a symbolic link a container planted there.
// ok is false when an optional key is missing.
func (r *resolver) fileKey(ref *corev1.FileKeySelector) (value string, ok bool, err error) {
	dir, found := r.node.Volumes[ref.VolumeName]
	if !found {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by fileKeyRef", ref.VolumeName)
	}
	f, err := nofollow.Open(dir, filepath.Join(dir, ref.Path), os.O_RDONLY, 0)
	if err != nil {
		return "", false, fmt.Errorf("fileKeyRef: %w", err)
	}
	defer f.Close()
	v, found, err := parseEnvFile(f, ref.Key)
	if err != nil {
		return "", false, fmt.Errorf("fileKeyRef: %s: %w", ref.Path, err)
	}
	if !found || v == "" {
		if isOptional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q", ref.Key, ref.Path)
	}
	return v, true, nil
}

// parseEnvFile finds key in an env file as the kubelet's strict parser
// reads one: KEY='value' lines (single quotes, taken literally, which may
// span lines, a comment after them allowed), blank lines and # comments
// skipped, no space before '='; "KEY= 'x'" assigns the empty string.
func parseEnvFile(r io.Reader, key string) (string, bool, error) {
	scanner := bufio.NewScanner(r)
	lineNum := 0
	for scanner.Scan() {
		lineNum++
		line := strings.TrimLeft(scanner.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return "", false, fmt.Errorf("line %d: missing '='", lineNum)
		}
		if name == "" || strings.TrimRight(name, " \t") != name {
			return "", false, fmt.Errorf("line %d: an empty name or whitespace before '='", lineNum)
		}
		if trimmed := strings.TrimLeft(value, " \t"); trimmed != value {
			if name == key {
				return "", true, nil
			}
			continue
		}
		if !strings.HasPrefix(value, "'") {
			return "", false, fmt.Errorf("line %d: the value must be enclosed in single quotes", lineNum)
		}
		var b strings.Builder
		rest, start := value[1:], lineNum
		for {
			if end := strings.Index(rest, "'"); end >= 0 {
				b.WriteString(rest[:end])
				if after := strings.TrimLeft(rest[end+1:], " \t"); after != "" && !strings.HasPrefix(after, "#") {
					return "", false, fmt.Errorf("line %d: unexpected content after the closing quote", lineNum)
				}
				break
			}
			b.WriteString(rest)
			b.WriteString("\n")
			if !scanner.Scan() {
				return "", false, fmt.Errorf("line %d: unclosed single quote", start)
			}
			lineNum++
			rest = scanner.Text()
		}
		if name == key {
			return b.String(), true, nil
		}
	}
	return "", false, scanner.Err()
}
