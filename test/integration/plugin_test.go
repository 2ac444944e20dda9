package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
)

// pluginUser is kubectl with kubectl-attachdetach and its completion script on
// PATH, installed as a user installs them, and a kubeconfig of two contexts:
// "elsewhere", the current one, names a server nobody listens on; "test" the
// package's API server, as the admin, in the scenario's namespace.
type pluginUser struct {
	path, kubeconfig string
}

func newPluginUser(t *testing.T, s *scenario) pluginUser {
	t.Helper()
	dir := t.TempDir()
	s.Must(os.Symlink(env.Controller, filepath.Join(dir, "kubectl-attachdetach")))
	script, err := os.ReadFile(filepath.Join(repoRoot(t), "plugins", "kubectl_complete-attachdetach"))
	s.Must(err)
	s.Must(os.WriteFile(filepath.Join(dir, "kubectl_complete-attachdetach"), script, 0o755))

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: env.Host, CertificateAuthorityData: env.CAData}
	cfg.Clusters["elsewhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthorityData: env.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: env.AdminToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: s.Namespace}
	cfg.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "elsewhere", AuthInfo: "admin"}
	cfg.CurrentContext = "elsewhere"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	s.Must(clientcmd.WriteToFile(*cfg, kubeconfig))
	return pluginUser{path: dir + string(os.PathListSeparator) + os.Getenv("PATH"), kubeconfig: kubeconfig}
}

// kubectl runs the real kubectl as the user.
func (u pluginUser) kubectl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), env.Tool(binaries.Kubectl), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+u.kubeconfig, "PATH="+u.path)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestPluginThroughKubectl runs `kubectl attachdetach` through the real kubectl
// against the real API server: --context picks the named context and its
// namespace; --as a user without rights is refused, naming what explain must
// read; --as a user bound to the explain-reader ClusterRole of the manifests
// explains; its help has kubectl's layout; and kubectl completes pod/, pvc/ and
// node/ names through kubectl_complete-attachdetach.
func TestPluginThroughKubectl(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := s.Nodes[0]
	v := s.AttachedVolume("data", "web", node)
	u := newPluginUser(t, s)
	explainsWeb := "volume " + v.PV

	t.Run("--context", func(t *testing.T) {
		out, errOut, err := u.kubectl(t, "attachdetach", "explain", "pod/web", "--context", "test")
		if err != nil || !strings.Contains(out, explainsWeb) {
			t.Errorf("explain --context test: %v\n%s%s", err, out, errOut)
		}
		// The current context, whose server does not answer, is not the one read.
		if _, errOut, err := u.kubectl(t, "attachdetach", "explain", "pod/web", "--timeout=10s"); err == nil || !strings.Contains(errOut, "127.0.0.1:1") {
			t.Errorf("explain in the current context: %v, want a failure to reach 127.0.0.1:1\n%s", err, errOut)
		}
	})

	nobody, reader := "nobody-"+s.Namespace, "reader-"+s.Namespace
	t.Run("--as a user without rights", func(t *testing.T) {
		_, errOut, err := u.kubectl(t, "attachdetach", "explain", "pod/web", "--context=test", "--as="+nobody)
		refusal := regexp.MustCompile(`User "` + regexp.QuoteMeta(nobody) + `" cannot list resource "\w+".*explain needs list and watch on pods, nodes, `)
		if err == nil || !refusal.MatchString(errOut) {
			t.Errorf("explain --as %s: %v, want refused with %q:\n%s", nobody, err, refusal, errOut)
		}
	})

	t.Run("--as a user with the explain-reader role", func(t *testing.T) {
		bindExplainReader(t, s, reader)
		var out, errOut string
		suite.Eventually(t, suite.WaitTimeout, "explain --as "+reader+" to explain pod/web", func() bool {
			var err error
			out, errOut, err = u.kubectl(t, "attachdetach", "explain", "pod/web", "--context=test", "--as="+reader)
			return err == nil && strings.Contains(out, explainsWeb)
		})
		if strings.Contains(errOut, "forbidden") {
			t.Errorf("explain --as %s was refused something:\n%s", reader, errOut)
		}
	})

	t.Run("help", func(t *testing.T) {
		out, errOut, err := u.kubectl(t, "attachdetach", "--help")
		for _, want := range []string{"\nExamples:\n", "\nUsage:\n  kubectl attachdetach [command] [options]\n", `Use "kubectl attachdetach <command> --help"`} {
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("kubectl attachdetach --help: %v, lacks %q:\n%s%s", err, want, out, errOut)
			}
		}
	})

	t.Run("completion", func(t *testing.T) {
		for _, tc := range []struct {
			words []string
			want  []string
		}{
			{[]string{"explain", "p"}, []string{"pod/", "pvc/", "pv/", ":6"}},
			{[]string{"explain", "--context=test", "pod/"}, []string{"pod/web", ":4"}},
			{[]string{"explain", "--context=test", "pvc/d"}, []string{"pvc/" + v.Claim, ":4"}},
			{[]string{"explain", "--context=test", "-n", "kube-public", "pod/"}, []string{":4"}},
			{[]string{"explain", "--context", ""}, []string{"elsewhere", "test", ":4"}},
		} {
			if got := u.complete(t, tc.words...); !slices.Equal(got, tc.want) {
				t.Errorf("kubectl __complete attachdetach %q = %q, want %q", tc.words, got, tc.want)
			}
		}
		// Other tests' namespaces and nodes share the cluster.
		if got := u.complete(t, "explain", "--context=test", "-n", ""); !slices.Contains(got, s.Namespace) || got[len(got)-1] != ":4" {
			t.Errorf("kubectl __complete attachdetach explain -n '' = %q, want %s among them", got, s.Namespace)
		}
		if got := u.complete(t, "explain", "--context=test", "node/"+node); !slices.Contains(got, "node/"+node) || got[len(got)-1] != ":4" {
			t.Errorf("kubectl __complete attachdetach explain node/%s = %q, want node/%s among them", node, got, node)
		}
	})
}

// complete runs kubectl's completion of `kubectl attachdetach WORDS...` and
// returns its lines: the completions, then the directive.
func (u pluginUser) complete(t *testing.T, words ...string) []string {
	t.Helper()
	out, errOut, err := u.kubectl(t, append([]string{"__complete", "attachdetach"}, words...)...)
	if err != nil {
		t.Errorf("kubectl __complete attachdetach %q: %v\n%s", words, err, errOut)
	}
	return strings.Split(strings.TrimSpace(out), "\n")
}

// bindExplainReader creates the explain-reader component's ClusterRole under a
// name of the test's own and binds it to user, for the test's duration.
func bindExplainReader(t *testing.T, s *scenario, user string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "manifests", "components", "explain-reader", "clusterrole.yaml"))
	s.Must(err)
	role := &rbacv1.ClusterRole{}
	s.Must(yaml.UnmarshalStrict(src, role))
	role.Name += "-" + s.Namespace
	ctx := t.Context()
	_, err = s.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	s.Must(err)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	_, err = s.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	s.Must(err)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = s.Client.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = s.Client.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	})
}
