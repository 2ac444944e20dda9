package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd/api"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
)

// completionTimeout bounds the API requests of one completion, so that a
// cluster that does not answer leaves the shell waiting only so long.
const completionTimeout = 5 * time.Second

// kindResources are the API resources behind explain's kinds.
var kindResources = map[explain.Kind]schema.GroupVersionResource{
	explain.Pod:              {Version: "v1", Resource: "pods"},
	explain.Claim:            {Version: "v1", Resource: "persistentvolumeclaims"},
	explain.PV:               {Version: "v1", Resource: "persistentvolumes"},
	explain.Node:             {Version: "v1", Resource: "nodes"},
	explain.VolumeAttachment: {Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"},
}

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// completeTarget completes explain's KIND/NAME: the kinds first, then, after the
// slash, the names of that kind in the cluster (in the namespace of -n or the
// context for pods and claims), listed with the user's credentials.
func completeTarget(ctx context.Context, config genericclioptions.RESTClientGetter, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	typed, prefix, hasSlash := strings.Cut(toComplete, "/")
	if !hasSlash {
		var kinds []cobra.Completion
		for _, k := range explain.Kinds {
			if strings.HasPrefix(string(k), strings.ToLower(toComplete)) {
				kinds = append(kinds, string(k)+"/")
			}
		}
		return kinds, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	kind, known := explain.ParseKind(typed)
	if !known {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	namespace := ""
	if kind.Namespaced() {
		ns, _, err := config.ToRawKubeConfigLoader().Namespace()
		if err != nil {
			cobra.CompErrorln(err.Error())
			return nil, cobra.ShellCompDirectiveError
		}
		namespace = ns
	}
	client, err := metadataClient(config)
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveError
	}
	names, err := listNames(ctx, client, kindResources[kind], namespace)
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveError
	}
	var out []cobra.Completion
	for _, name := range names {
		if strings.HasPrefix(name, prefix) {
			out = append(out, typed+"/"+name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// listNames lists the names of one resource, sorted. The list is served from
// the API server's watch cache (resourceVersion 0), as fresh as a completion
// needs and cheap on a large cluster.
func listNames(ctx context.Context, client metadata.Interface, gvr schema.GroupVersionResource, namespace string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	list, err := client.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvr.Resource, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, item := range list.Items {
		names = append(names, item.Name)
	}
	slices.Sort(names)
	return names, nil
}

func metadataClient(config genericclioptions.RESTClientGetter) (metadata.Interface, error) {
	cfg, err := readOnlyConfig(config, "attachdetach-controller-completion")
	if err != nil {
		return nil, err
	}
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	return client, nil
}

// registerConfigCompletion completes kubectl's flags that name something: the
// namespaces of the cluster, and the contexts, clusters and users of the
// kubeconfig.
func registerConfigCompletion(root *cobra.Command, config *genericclioptions.ConfigFlags) {
	fromKubeconfig := func(names func(api.Config) []string) cobra.CompletionFunc {
		return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			raw, err := config.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				cobra.CompErrorln(err.Error())
				return nil, cobra.ShellCompDirectiveError
			}
			out := names(raw)
			slices.Sort(out)
			return out, cobra.ShellCompDirectiveNoFileComp
		}
	}
	completions := map[string]cobra.CompletionFunc{
		"namespace": func(c *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			client, err := metadataClient(config)
			if err != nil {
				cobra.CompErrorln(err.Error())
				return nil, cobra.ShellCompDirectiveError
			}
			names, err := listNames(c.Context(), client, namespaces, "")
			if err != nil {
				cobra.CompErrorln(err.Error())
				return nil, cobra.ShellCompDirectiveError
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		"context": fromKubeconfig(func(c api.Config) []string { return keys(c.Contexts) }),
		"cluster": fromKubeconfig(func(c api.Config) []string { return keys(c.Clusters) }),
		"user":    fromKubeconfig(func(c api.Config) []string { return keys(c.AuthInfos) }),
	}
	for flag, complete := range completions {
		mustRegisterCompletion(root, flag, complete)
	}
}

func registerOutputCompletion(cmd *cobra.Command) {
	mustRegisterCompletion(cmd, "output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// mustRegisterCompletion registers the completion of a flag the command has: an
// error is a mistake in this file.
func mustRegisterCompletion(cmd *cobra.Command, flag string, complete cobra.CompletionFunc) {
	if err := cmd.RegisterFlagCompletionFunc(flag, complete); err != nil {
		panic(fmt.Sprintf("completing --%s: %v", flag, err))
	}
}

func keys[V any](m map[string]V) []string {
	return slices.Collect(maps.Keys(m))
}
