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

// markdownFiles returns the repository's Markdown files, relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNamedTestsExist(t *testing.T) {
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range markdownFiles(t) {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testName.FindAllStringSubmatch(string(src), -1) {
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
	for _, page := range markdownFiles(t) {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(src), -1) {
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
