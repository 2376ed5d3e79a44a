// tideway-kube is a Kubernetes control plane in one binary: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy and kubeadm, each run by the
// upstream command's own entry point, unchanged.
//
// The command is the name the binary is invoked by (a symlink named kube-apiserver)
// or its first argument (tideway-kube kube-apiserver --help).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	_ "time/tzdata" // CronJob time zones, as kube-apiserver and kube-controller-manager link it

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

// Each entry does what the upstream command's main does; os.Args[0] is the command's name.
//
// Some commands show the process-wide flag sets as flags of their own: kube-proxy Go's
// flag.CommandLine, kubeadm that and pflag's, etcd's gateway and grpc-proxy pflag's. Here those
// sets also hold what the other commands' packages register at init (cadvisor's flags, linked
// for kube-controller-manager; --version from component-base), so such a command starts them
// empty, as they are in its own binary.
var commands = map[string]func(){
	"etcd": func() {
		pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)
		etcdmain.Main(os.Args)
	},
	"kube-apiserver": func() {
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	},
	"kube-controller-manager": func() {
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	},
	"kube-scheduler": func() {
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	},
	"kube-proxy": func() {
		flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError)
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	},
	"kubeadm": func() {
		flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError)
		pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)
		kubeadmerrors.HandleError(kubeadm.Run())
	},
}

func main() {
	if run, ok := commands[filepath.Base(os.Args[0])]; ok {
		run()
		return
	}
	if len(os.Args) > 1 {
		if run, ok := commands[os.Args[1]]; ok {
			os.Args = os.Args[1:]
			run()
			return
		}
	}
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: %s COMMAND [ARGS...]\n\ncommands:\n", filepath.Base(os.Args[0]))
	for _, name := range names {
		fmt.Fprintf(os.Stderr, "  %s\n", name)
	}
	os.Exit(2)
}
