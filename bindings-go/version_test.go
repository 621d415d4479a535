package polylimit

import (
	"os"
	"regexp"
	"testing"
)

func TestVersionIsTheWorkspaceVersion(t *testing.T) {
	manifest, err := os.ReadFile("../Cargo.toml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version = "([^"]+)"`).FindSubmatch(manifest)
	if m == nil {
		t.Fatal("no version in the workspace Cargo.toml")
	}
	if Version != string(m[1]) {
		t.Fatalf("Version = %q, the workspace Cargo.toml says %q", Version, m[1])
	}
}
