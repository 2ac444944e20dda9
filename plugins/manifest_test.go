// Package plugins holds the krew manifest of `kubectl attachdetach` and the
// completion script kubectl runs for it; its tests check the manifest against
// the archives hack/release.sh builds.
package plugins

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The platforms the plugin is released for, and the archives hack/release.sh
// builds for each: kubectl-attachdetach_VERSION_OS_ARCH.tar.gz, .zip on Windows,
// holding the binary, .exe on Windows.
var (
	systems       = []string{"linux", "darwin", "windows"}
	architectures = []string{"amd64", "arm64"}
)

const releases = "https://github.com/attachdetach-controller/attachdetach-controller/releases/download/"

// manifest is what the tests read of a krew Plugin.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func readManifest(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("attachdetach.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

func parse(t *testing.T, src string) manifest {
	t.Helper()
	var m manifest
	if err := yaml.UnmarshalStrict([]byte(stripUnread(src)), &m); err != nil {
		t.Fatalf("parsing the manifest: %v", err)
	}
	return m
}

// stripUnread drops the fields of the manifest the tests do not read, so that
// strict parsing still catches a misspelt field among those they do.
func stripUnread(src string) string {
	unread := regexp.MustCompile(`(?m)^  (homepage|description|caveats):.*\n((    .*)?\n)*`)
	return unread.ReplaceAllString(src, "")
}

func TestManifestNamesEveryPlatformsArchive(t *testing.T) {
	m := parse(t, readManifest(t))
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "attachdetach" {
		t.Errorf("manifest is %s %s %s, want krew.googlecontainertools.github.com/v1alpha2 Plugin attachdetach", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != "{{VERSION}}" || m.Spec.ShortDescription == "" {
		t.Errorf("version %q and short description %q: want {{VERSION}} and a description", m.Spec.Version, m.Spec.ShortDescription)
	}
	var seen []string
	for _, p := range m.Spec.Platforms {
		osName, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		platform := osName + "_" + arch
		seen = append(seen, platform)
		archive, bin := "tar.gz", "kubectl-attachdetach"
		if osName == "windows" {
			archive, bin = "zip", "kubectl-attachdetach.exe"
		}
		if want := fmt.Sprintf("%s{{VERSION}}/kubectl-attachdetach_{{VERSION}}_%s.%s", releases, platform, archive); p.URI != want {
			t.Errorf("%s: uri %s, want %s", platform, p.URI, want)
		}
		if want := "{{SHA256_" + platform + "}}"; p.SHA256 != want {
			t.Errorf("%s: sha256 %s, want %s", platform, p.SHA256, want)
		}
		if p.Bin != bin {
			t.Errorf("%s: bin %s, want %s", platform, p.Bin, bin)
		}
		if len(p.Selector.MatchLabels) != 2 {
			t.Errorf("%s: selector %v, want os and arch only", platform, p.Selector.MatchLabels)
		}
	}
	var want []string
	for _, osName := range systems {
		for _, arch := range architectures {
			want = append(want, osName+"_"+arch)
		}
	}
	slices.Sort(seen)
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Errorf("platforms %v, want each of %v once", seen, want)
	}
}

// TestFilledManifestIsValid fills the placeholders as hack/release.sh does and
// checks none is left and the result still parses: the manifest uses no name
// release.sh does not fill.
func TestFilledManifestIsValid(t *testing.T) {
	src := readManifest(t)
	values := map[string]string{"VERSION": "v0.1.0"}
	for _, osName := range systems {
		for _, arch := range architectures {
			values["SHA256_"+osName+"_"+arch] = strings.Repeat("0", 64)
		}
	}
	placeholder := regexp.MustCompile(`\{\{([A-Za-z0-9_]+)\}\}`)
	for _, m := range placeholder.FindAllStringSubmatch(src, -1) {
		if _, ok := values[m[1]]; !ok {
			t.Errorf("placeholder %s is none of those release.sh fills: VERSION and SHA256_<os>_<arch>", m[0])
		}
	}
	filled := placeholder.ReplaceAllStringFunc(src, func(s string) string { return values[strings.Trim(s, "{}")] })
	if strings.Contains(filled, "{{") {
		t.Errorf("placeholders left after filling:\n%s", filled)
	}
	m := parse(t, filled)
	if m.Spec.Version != "v0.1.0" {
		t.Errorf("filled version %q", m.Spec.Version)
	}
	for _, p := range m.Spec.Platforms {
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.SHA256) || !strings.HasPrefix(p.URI, releases+"v0.1.0/kubectl-attachdetach_v0.1.0_") {
			t.Errorf("filled platform %v: uri %s, sha256 %s", p.Selector.MatchLabels, p.URI, p.SHA256)
		}
	}
}

func TestCompletionScriptRunsThePluginsComplete(t *testing.T) {
	info, err := os.Stat("kubectl_complete-attachdetach")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o111 == 0 {
		t.Errorf("kubectl_complete-attachdetach is not executable: %s", info.Mode())
	}
	src, err := os.ReadFile("kubectl_complete-attachdetach")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(src), "#!/bin/sh\n") || !strings.Contains(string(src), `exec kubectl-attachdetach __complete "$@"`) {
		t.Errorf("kubectl_complete-attachdetach does not hand its words to kubectl-attachdetach __complete:\n%s", src)
	}
}

// TestReleaseScriptFillsThisManifest reads hack/release.sh: it builds the
// manifest's platforms, names their archives as the manifest's URIs do, and fills
// this template's placeholders.
func TestReleaseScriptFillsThisManifest(t *testing.T) {
	src, err := os.ReadFile("../hack/release.sh")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("no hack/release.sh in this checkout")
	}
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^all_platforms="([^"]*)"$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("hack/release.sh has no all_platforms=\"OS/ARCH ...\" line")
	}
	var want []string
	for _, osName := range systems {
		for _, arch := range architectures {
			want = append(want, osName+"/"+arch)
		}
	}
	got := strings.Fields(string(m[1]))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("hack/release.sh builds %v, the manifest names %v", got, want)
	}
	for _, step := range []string{
		`krew_template=${KREW_TEMPLATE:-plugins/attachdetach.yaml}`,
		`name=kubectl-attachdetach_${version}_${os}_${arch}`,
		`"$out/$name.zip"`,
		`"$out/$name.tar.gz"`,
		`"s/{{VERSION}}/$version/g"`,
		`"s/{{SHA256_${os}_${arch}}}/$sum/g"`,
	} {
		if !strings.Contains(string(src), step) {
			t.Errorf("hack/release.sh no longer has %s, which the manifest's names rely on", step)
		}
	}
}
