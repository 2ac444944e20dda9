package main

import (
	"slices"
	"testing"
)

func TestPluginInvocation(t *testing.T) {
	cases := []struct {
		argv0       string
		args        []string
		displayName string
		plugin      bool
	}{
		{"/usr/local/bin/kubectl-attachdetach", []string{"explain", "pod/web-0"}, "kubectl attachdetach", true},
		{"/root/.krew/bin/kubectl-attachdetach", nil, "kubectl attachdetach", true},
		{"kubectl-attachdetach.exe", []string{"--help"}, "kubectl attachdetach", true},
		{"/attachdetach-controller", []string{"explain", "pod/web-0"}, "attachdetach-controller", true},
		{"/attachdetach-controller", []string{"options"}, "attachdetach-controller", true},
		{"/attachdetach-controller", []string{"--leader-elect"}, "", false},
		{"/attachdetach-controller", nil, "", false},
	}
	for _, tc := range cases {
		displayName, args, plugin := pluginInvocation(tc.argv0, tc.args)
		if plugin != tc.plugin || displayName != tc.displayName || (plugin && !slices.Equal(args, tc.args)) {
			t.Errorf("pluginInvocation(%q, %q) = %q, %q, %v; want %q, %v", tc.argv0, tc.args, displayName, args, plugin, tc.displayName, tc.plugin)
		}
	}
}
