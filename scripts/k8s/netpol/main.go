// Command gymnetpol enforces NetworkPolicy on the one-node test cluster of gym-sandboxd: the
// network-policy controller of kube-router (its firewall part only: no routing, no service
// proxy), which turns the cluster's NetworkPolicies into iptables rules and ipsets on the node,
// for the traffic of the Pods on its bridge (br_netfilter hands bridged frames to iptables).
// scripts/k8s/build.sh builds it beside gymkube; scripts/k8s/up.sh starts it, down.sh stops it.
//
//	gymnetpol run --kubeconfig FILE --node NAME --service-cidr CIDR
//	gymnetpol cleanup     removes its chains and ipsets from the machine
//	gymnetpol version
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/coreos/go-iptables/iptables"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// The kube-router version go.mod requires, set by build.sh (-X), which asks for it to tell
// whether the cached binary is of the current pin.
var kubeRouterVersion = "unknown"

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: gymnetpol <run|cleanup|version> [flags]"))
	}
	switch os.Args[1] {
	case "version":
		fmt.Println("gymnetpol: kube-router " + kubeRouterVersion + " network-policy controller")
	case "cleanup":
		fail(cleanup())
	case "run":
		fail(run(os.Args[2:]))
	default:
		fail(fmt.Errorf("unknown command %q (run or cleanup)", os.Args[1]))
	}
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gymnetpol:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	flags := flag.NewFlagSet("run", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the controller's identity")
	node := flags.String("node", "", "the node's name (its InternalIP is the node's address)")
	serviceCIDR := flags.String("service-cidr", "10.96.0.0/24", "the cluster's Service range")
	syncPeriod := flags.Duration("sync-period", time.Minute, "full resync period")
	klog.InitFlags(flags) // -v 1 logs how long each sync took
	if err := flags.Parse(args); err != nil {
		return err
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	config := options.NewKubeRouterConfig()
	config.RunFirewall = true
	config.EnableIPv4 = true
	config.HostnameOverride = *node
	config.ClusterIPCIDRs = []string{*serviceCIDR}
	config.IPTablesSyncPeriod = *syncPeriod

	stop := make(chan struct{})
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stop)
	for informer, synced := range factory.WaitForCacheSync(stop) {
		if !synced {
			return fmt.Errorf("the informer of %v did not sync", informer)
		}
	}

	var ipsetMutex sync.Mutex
	iptablesHandlers, ipsetHandlers, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return err
	}
	controller, err := netpol.NewNetworkPolicyController(client, config, pods, policies, namespaces,
		&ipsetMutex, iptablesHandlers, ipsetHandlers)
	if err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(controller.PodEventHandler); err != nil {
		return err
	}
	if _, err := namespaces.AddEventHandler(controller.NamespaceEventHandler); err != nil {
		return err
	}
	if _, err := policies.AddEventHandler(controller.NetworkPolicyEventHandler); err != nil {
		return err
	}

	// The controller reports a heartbeat after each sync; nothing here serves them.
	heartbeats := make(chan *healthcheck.ControllerHeartbeat, 10)
	go func() {
		for range heartbeats {
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go controller.Run(heartbeats, stop, &wg)
	klog.Infof("enforcing NetworkPolicy on node %s", *node)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	close(stop)
	wg.Wait()
	return nil
}

// The prefixes of what the controller makes: chains in the filter table and ipsets.
var chainPrefixes = []string{"KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"}
var ipsetPrefixes = []string{"KUBE-SRC-", "KUBE-DST-"}

func ours(name string, prefixes []string) bool {
	for _, prefix := range prefixes {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// cleanup removes the controller's chains (and the jumps to them from the built-in chains) and
// its ipsets, nothing else. kube-router's own Cleanup needs a controller built against a running
// cluster (it does nothing on an empty one), so the rules are found by their names here.
func cleanup() error {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return err
	}
	for _, builtin := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		rules, err := ipt.List("filter", builtin)
		if err != nil {
			return err
		}
		// By number, last first (a rule's comment is quoted in the listing); the first line is the
		// chain's policy, so rule n is rules[n].
		for n := len(rules) - 1; n >= 1; n-- {
			fields := strings.Fields(rules[n])
			if fields[0] != "-A" || !ours(fields[len(fields)-1], chainPrefixes) {
				continue
			}
			if err := ipt.Delete("filter", builtin, fmt.Sprint(n)); err != nil {
				return err
			}
		}
	}
	chains, err := ipt.ListChains("filter")
	if err != nil {
		return err
	}
	// Emptied first, deleted after: they jump to each other.
	for _, chain := range chains {
		if ours(chain, chainPrefixes) {
			if err := ipt.ClearChain("filter", chain); err != nil {
				return err
			}
		}
	}
	for _, chain := range chains {
		if ours(chain, chainPrefixes) {
			if err := ipt.DeleteChain("filter", chain); err != nil {
				return err
			}
		}
	}
	names, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return fmt.Errorf("ipset list: %w", err)
	}
	for _, name := range strings.Fields(string(names)) {
		if ours(name, ipsetPrefixes) {
			if out, err := exec.Command("ipset", "destroy", name).CombinedOutput(); err != nil {
				return fmt.Errorf("ipset destroy %s: %w: %s", name, err, out)
			}
		}
	}
	return nil
}
