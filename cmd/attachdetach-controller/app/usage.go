package app

import (
	"flag"
	"fmt"
	"strings"
)

// kcmFlags are the flags kube-controller-manager has under the same name with the
// same meaning, so that its settings carry over.
var kcmFlags = map[string]bool{
	"kubeconfig":                           true,
	"kube-api-qps":                         true,
	"kube-api-burst":                       true,
	"kube-api-content-type":                true,
	"attach-detach-reconcile-sync-period":  true,
	"disable-attach-detach-reconcile-sync": true,
	"disable-force-detach-on-timeout":      true,
	"leader-elect":                         true,
	"leader-elect-lease-duration":          true,
	"leader-elect-renew-deadline":          true,
	"leader-elect-retry-period":            true,
	"leader-elect-resource-name":           true,
	"leader-elect-resource-namespace":      true,
	"version":                              true,
	"tls-cert-file":                        true,
	"tls-private-key-file":                 true,
}

// ownFlags are the flags kube-controller-manager does not have.
var ownFlags = map[string]bool{
	"http-endpoint":                   true,
	"http-endpoint-insecure":          true,
	"enable-pprof":                    true,
	"max-wait-for-unmount":            true,
	"max-wait-for-unmount-per-driver": true,
	"detach-on-shutdown-taint":        true,
	"shadow":                          true,
	"shadow-grace":                    true,
	"operation-timeout":               true,
	"workers":                         true,
	"status-workers":                  true,
	"status-min-batch-window":         true,
	"event-qps":                       true,
	"event-burst":                     true,
}

// printUsage prints the flags in three groups: kube-controller-manager's, the
// controller's own, and the logging flags of Kubernetes components.
func printUsage(fs *flag.FlagSet) {
	out := fs.Output()
	fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
	groups := []struct {
		title string
		in    func(name string) bool
	}{
		{"Flags of kube-controller-manager (same name and meaning):", func(n string) bool { return kcmFlags[n] }},
		{"Flags of this controller only:", func(n string) bool { return ownFlags[n] }},
		{"Logging flags (those of kube-controller-manager):", isLoggingFlag},
	}
	for _, g := range groups {
		fmt.Fprintf(out, "\n%s\n", g.title)
		fs.VisitAll(func(f *flag.Flag) {
			if g.in(f.Name) {
				fmt.Fprint(out, flagUsage(f))
			}
		})
	}
}

func flagUsage(f *flag.Flag) string {
	var b strings.Builder
	typ, usage := flag.UnquoteUsage(f)
	fmt.Fprintf(&b, "  --%s", f.Name)
	if typ != "" {
		fmt.Fprintf(&b, " %s", typ)
	}
	fmt.Fprintf(&b, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
	if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
		fmt.Fprintf(&b, " (default %q)", f.DefValue)
	}
	b.WriteString("\n")
	return b.String()
}
