// Command gymkube is the one-node test cluster of gym-sandboxd in one binary:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
// kubectl are its subcommands. One binary means one compile of the tree the
// components share and one link, instead of six (scripts/k8s/build.sh).
//
//	gymkube <etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl> [flags]
package main

import (
	"context"
	"fmt"
	"os"
	_ "time/tzdata" // CronJob time zones, as the apiserver and controller manager expect

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var components = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gymkube <etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl> [flags]")
		os.Exit(2)
	}
	name := os.Args[1]
	// Each component parses os.Args[1:] as its own flags: drop the subcommand.
	os.Args = append([]string{name}, os.Args[2:]...)
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
		return
	case "kubectl":
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCommand, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "gymkube: unknown component %q\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
