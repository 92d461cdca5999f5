package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/test/fault"
)

// The documentation shows this command whole: docs/providers.md, "A whole
// example".
func TestDocsShowThisCommand(t *testing.T) {
	code, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	docs := filepath.Join(fault.RepoRoot(t), "docs", "providers.md")
	text, err := os.ReadFile(docs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "```go\n"+string(code)+"```\n") {
		t.Errorf("%s does not show main.go as it is: copy it into the section \"A whole example\"", docs)
	}
}
