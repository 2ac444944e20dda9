// Package docs checks the project's Markdown: every test a page names exists, and
// every relative link stays inside the repository and leads to a file.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const root = "../.."

var (
	testName     = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9]*)`")
	testFunc     = regexp.MustCompile(`(?m)^func (Test[A-Z][A-Za-z0-9]*)\(`)
	markdownLink = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
)

// filesEndingIn returns the repository's files whose names end in suffix, with
// their contents, by path relative to root; hidden directories are skipped.
func filesEndingIn(t *testing.T, suffix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root:
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, suffix):
			return nil
		}
		src, err := os.ReadFile(path)
		out[path] = string(src)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNamedTestsExist(t *testing.T) {
	defined := map[string]bool{}
	for _, src := range filesEndingIn(t, "_test.go") {
		for _, m := range testFunc.FindAllStringSubmatch(src, -1) {
			defined[m[1]] = true
		}
	}
	for page, src := range filesEndingIn(t, ".md") {
		for _, m := range testName.FindAllStringSubmatch(src, -1) {
			if !defined[m[1]] {
				t.Errorf("%s names %s, which no test file defines", page, m[1])
			}
		}
	}
}

func TestLinksStayInTheRepository(t *testing.T) {
	repo, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for page, src := range filesEndingIn(t, ".md") {
		for _, m := range markdownLink.FindAllStringSubmatch(src, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(page), target))
			if err != nil {
				t.Fatal(err)
			}
			if rel, err := filepath.Rel(repo, abs); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s links %s, outside the repository", page, target)
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links %s, which does not exist", page, target)
			}
		}
	}
}

// readmeMaxLines keeps the README a front door: the rest belongs in docs/.
const readmeMaxLines = 160

// readmeCommandsWithin is how near its top the README must give the two commands.
const readmeCommandsWithin = 40

func TestReadmeIsAFrontDoor(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(src), "\n"), "\n")
	if len(lines) > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to docs/", len(lines), readmeMaxLines)
	}
	top := strings.Join(lines[:min(len(lines), readmeCommandsWithin)], "\n")
	for _, command := range []string{"hack/run.sh", "hack/test.sh"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(command) + `\s`).MatchString(top) {
			t.Errorf("README.md does not start a line with %s in its first %d lines", command, readmeCommandsWithin)
		}
		info, err := os.Stat(filepath.Join(root, command))
		if err != nil || info.Mode().Perm()&0o111 == 0 {
			t.Errorf("README.md's %s is not an executable of the repository: %v", command, err)
		}
	}
	for _, private := range []string{"shared with", "developers'", "helper session"} {
		if strings.Contains(string(src), private) {
			t.Errorf("README.md speaks of the machine its developers work on (%q): it is for operators", private)
		}
	}
}
